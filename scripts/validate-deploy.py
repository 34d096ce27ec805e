#!/usr/bin/env python3
"""Validates every deploy manifest offline, strictly; prints one line per file and exits non-zero on any failure.

- Kubernetes built-in kinds: kubernetes-validate's bundled schemas, strict (an unknown field is an error). A kind
  it has no schema for is a failure, not a warning.
- Custom resources (Istio, Traefik) and the Envoy config: the JSON Schemas in deploy/schemas/, matched by
  apiVersion and kind. They cover exactly the fields the files use, with additionalProperties: false.
- deploy/kubernetes/forward-auth-nginx-configmap.yaml must hold the same snippets as deploy/nginx/.
- Self-test: each schema must reject its document with a field "bogusField" added at the top level, inside spec
  (or static_resources) and inside every other object of the document except free-form maps (labels, header
  maps); and every object in every schema must say additionalProperties (false, or the schema of a map's values).
"""
import copy
import glob
import json
import os
import sys

import jsonschema
import kubernetes_validate
import referencing
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS = {
    ("install.istio.io/v1alpha1", "IstioOperator"): "istio-operator.schema.json",
    ("security.istio.io/v1", "AuthorizationPolicy"): "istio-authorization-policy.schema.json",
    ("networking.istio.io/v1alpha3", "EnvoyFilter"): "istio-envoy-filter.schema.json",
    ("traefik.io/v1alpha1", "Middleware"): "traefik-middleware.schema.json",
    ("traefik.io/v1alpha1", "IngressRoute"): "traefik-ingressroute.schema.json",
}
ENVOY_SCHEMA = "envoy-bootstrap.schema.json"
ENVOY_CONFIGS = ["deploy/envoy/envoy.yaml"]
MANIFEST_GLOBS = ["deploy/kubernetes/*.yaml", "deploy/istio/*.yaml", "deploy/traefik/*.yaml"]
# Objects whose keys are data, not field names: the self-test does not add bogusField to them.
MAP_KEYS = {"labels", "matchLabels", "customRequestHeaders", "includeAdditionalHeadersInCheck"}
NGINX_COPIES = {"tokenguard-auth.conf": "deploy/nginx/tokenguard-auth.conf",
                "tokenguard-protect.conf": "deploy/nginx/tokenguard-protect.conf"}


def load_schemas():
    schemas = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/schemas/*.schema.json"))):
        with open(path) as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        schemas[os.path.basename(path)] = schema
    registry = referencing.Registry().with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in schemas.values())
    validators = {name: jsonschema.Draft202012Validator(s, registry=registry) for name, s in schemas.items()}
    return schemas, validators


def explain(error):
    """For a oneOf/anyOf failure, the errors of the branch the document meant: the one whose const and enum
    checks (filter names, @type) passed, or failed least."""
    if not error.context:
        return [error]
    branches = {}
    for e in error.context:
        branches.setdefault(e.relative_schema_path[0], []).append(e)
    meant = min(branches.values(), key=lambda es: (sum(e.validator in ("const", "enum") for e in es), len(es)))
    return [x for e in meant for x in explain(e)]


def schema_errors(validator, doc):
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        for x in explain(e):
            where = "/".join(str(p) for p in x.absolute_path) or "(top)"
            out.append(f"{where}: {x.message}")
    return out


def lint_schema(node, where, problems):
    """Every object schema must state additionalProperties (or unevaluatedProperties)."""
    if isinstance(node, dict):
        if (node.get("type") == "object" or "properties" in node) and not (
                "additionalProperties" in node or "unevaluatedProperties" in node):
            problems.append(f"{where}: an object without additionalProperties")
        for k, v in node.items():
            lint_schema(v, f"{where}/{k}", problems)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            lint_schema(v, f"{where}/{i}", problems)


def object_paths(node, path=()):
    """Paths of the objects in a document where a new key would be a field name."""
    if isinstance(node, dict):
        if not path or path[-1] not in MAP_KEYS:
            yield path
        for k, v in node.items():
            yield from object_paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from object_paths(v, path + (i,))


def self_test(validator, doc):
    """Returns the paths where an added bogusField was NOT rejected (empty when the schema is strict there)."""
    paths = list(object_paths(doc))
    inner = "spec" if "spec" in doc else "static_resources"
    required = [(), (inner,)]
    missed = []
    for path in required + [p for p in paths if p not in required]:
        mutated = copy.deepcopy(doc)
        target = mutated
        for p in path:
            target = target[p]
        target["bogusField"] = "bogus"
        if not list(validator.iter_errors(mutated)):
            missed.append("/".join(str(p) for p in path) or "(top)")
    return missed, len(paths)


def rel(path):
    return os.path.relpath(path, ROOT)


def main():
    failures = 0
    files = 0

    def report(ok, path, detail):
        nonlocal failures, files
        files += 1
        failures += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} {path}: {detail}")

    schemas, validators = load_schemas()
    lint = []
    for name, schema in schemas.items():
        lint_schema(schema, name, lint)
    for problem in lint:
        print(f"FAIL schema {problem}")
    failures += len(lint)

    k8s_version = kubernetes_validate.latest_version()
    paths = sorted({p for g in MANIFEST_GLOBS for p in glob.glob(os.path.join(ROOT, g))})
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        if not docs:
            report(False, rel(path), "no document")
            continue
        problems, notes = [], []
        for doc in docs:
            key = (doc.get("apiVersion"), doc.get("kind"))
            name = (doc.get("metadata") or {}).get("name")
            label = f"{key[1]}/{name}"
            if key in SCHEMAS:
                validator = validators[SCHEMAS[key]]
                errors = schema_errors(validator, doc)
                problems += [f"{label}: {e}" for e in errors]
                if not errors:
                    missed, count = self_test(validator, doc)
                    problems += [f"{label}: self-test: bogusField accepted at {m}" for m in missed]
                    notes.append(f"{label} ({SCHEMAS[key]}; bogusField refused at all {count} objects)")
                continue
            try:
                kubernetes_validate.validate(doc, k8s_version, strict=True)
                notes.append(f"{label} (Kubernetes {kubernetes_validate.utils.major_minor(k8s_version)}, strict)")
            except kubernetes_validate.SchemaNotFoundError:
                problems.append(f"{label}: no schema for {key[0]} {key[1]}: add one to deploy/schemas/ and SCHEMAS")
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path) or "(top)"
                problems.append(f"{label}: {where}: {e.message}")
            if key == ("v1", "ConfigMap") and name == "tokenguard-forward-auth-nginx":
                for item, source in NGINX_COPIES.items():
                    with open(os.path.join(ROOT, source)) as f:
                        if doc.get("data", {}).get(item) != f.read():
                            problems.append(f"{label}: data.{item} differs from {source}")
                notes[-1] += "; snippets equal to deploy/nginx/"
        report(not problems, rel(path), "; ".join(problems) if problems else ", ".join(notes))

    for config in ENVOY_CONFIGS:
        with open(os.path.join(ROOT, config)) as f:
            doc = yaml.safe_load(f)
        validator = validators[ENVOY_SCHEMA]
        problems = schema_errors(validator, doc)
        if not problems:
            missed, count = self_test(validator, doc)
            problems = [f"self-test: bogusField accepted at {m}" for m in missed]
        report(not problems, config, "; ".join(problems) if problems
               else f"({ENVOY_SCHEMA}; bogusField refused at all {count} objects)")

    print(f"deploy: {files} files, {files - failures} valid, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
