#!/usr/bin/env bash
# The module rules (README "Development"), checked over the import lines and `swift package dump-package`:
#   - TokenGuardCore imports none of Foundation, Logging, Metrics, GRDB, Yams (nor any C module);
#   - TokenGuardService imports no C module, TokenGuardFetch, TokenGuardRedis or TokenGuardServer;
#   - TokenGuardServer imports no C module, TokenGuardFetch or TokenGuardRedis;
#   - only TokenGuardCrypto imports COpenSSL, only TokenGuardFetch CCurl, only TokenGuardRedis CHiredis (tests and
#     the benchmark may use CJWT, the reference verifier);
#   - every module a target imports is declared in Package.swift (the compiler does not notice an import that
#     arrives through another target's dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build
swift package dump-package > .build/package-dump.json
python3 - <<'PY'
import json, os, re, sys

dump = json.load(open(".build/package-dump.json"))
# Product name -> module names it provides (products of dependencies are named as they are imported, except these).
module_of_product = {"GRDB": "GRDB", "Yams": "Yams", "Logging": "Logging", "Metrics": "Metrics", "MetricsTestKit": "MetricsTestKit",
                     "Hummingbird": "Hummingbird", "ServiceLifecycle": "ServiceLifecycle", "UnixSignals": "UnixSignals", "Prometheus": "Prometheus",
                     "ArgumentParser": "ArgumentParser", "JWTKit": "JWTKit", "NIOCore": "NIOCore"}
# Modules that come with the toolchain (no declaration needed).
toolchain = {"Foundation", "FoundationEssentials", "Dispatch", "Glibc", "Darwin", "Synchronization", "Testing", "XCTest", "_Concurrency"}
# Whole modules re-exported by a declared product (none: Hummingbird re-exports single types, not modules).
reexported = {}

problems = []
for target in dump["targets"]:
    name = target["name"]
    if target["type"] == "system":
        continue
    path = target.get("path") or ("Tests/" + name if target["type"] == "test" else "Sources/" + name)
    declared = set()
    for dependency in target["dependencies"]:
        kind, value = next(iter(dependency.items()))
        declared.add(module_of_product.get(value[0], value[0]))
    allowed = declared | toolchain
    for module in list(declared):
        allowed |= reexported.get(module, set())
    imports = {}
    for root, _, files in os.walk(path):
        for file in files:
            if not file.endswith(".swift"):
                continue
            for line in open(os.path.join(root, file), encoding="utf-8"):
                match = re.match(r"\s*(?:@testable\s+|@_exported\s+)?import\s+(?:struct\s+|enum\s+|class\s+|func\s+)?([A-Za-z_][A-Za-z0-9_]*)", line)
                if match:
                    imports.setdefault(match.group(1), os.path.join(root, file))
    for module, file in sorted(imports.items()):
        if module not in allowed:
            problems.append(f"{name}: imports {module} ({file}) without declaring it in Package.swift")
    forbidden = {
        "TokenGuardCore": {"Foundation", "FoundationEssentials", "Logging", "Metrics", "GRDB", "Yams", "COpenSSL", "CCurl", "CHiredis", "CJWT"},
        "TokenGuardService": {"COpenSSL", "CCurl", "CHiredis", "CJWT", "TokenGuardFetch", "TokenGuardRedis", "TokenGuardServer", "Hummingbird"},
        "TokenGuardServer": {"COpenSSL", "CCurl", "CHiredis", "CJWT", "TokenGuardFetch", "TokenGuardRedis"},
        "TokenGuardBatch": {"COpenSSL", "CCurl", "CHiredis", "CJWT", "TokenGuardFetch", "TokenGuardRedis", "TokenGuardServer"},
    }.get(name, set())
    owners = {"COpenSSL": "TokenGuardCrypto", "CCurl": "TokenGuardFetch", "CHiredis": "TokenGuardRedis"}
    for module in sorted(set(imports) & forbidden):
        problems.append(f"{name}: must not import {module} ({imports[module]})")
    for module, owner in owners.items():
        if module in imports and name != owner and target["type"] != "test" and name not in ("bench",):
            problems.append(f"{name}: imports {module}; only {owner} may")
    for module in sorted(declared & forbidden):
        problems.append(f"{name}: declares a dependency on {module}, which the layout forbids")

if problems:
    print("\n".join(problems))
    print(f"check-layout: {len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-layout: every import declared; Core pure; Service, Batch and Server free of C, Fetch and Redis")
PY
