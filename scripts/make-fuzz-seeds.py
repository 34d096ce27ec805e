#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (Fuzz/seeds/TARGET/) from the sample tokens, the sample JWKS and
configuration in examples/ and, when present, the public JWKS snapshots in ../shared (public keys only: the
real provider tokens there are not copied, they carry people's identifiers). Run from the repository root;
the output is committed, so fuzzing needs nothing outside the repository."""
import base64, glob, hashlib, json, os

root = "Fuzz/seeds"
seeds = {}

def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    name = hashlib.sha1(data).hexdigest()[:16]
    seeds.setdefault(target, {})[name] = data

def b64decode(segment):
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))

def parsed(line):
    try:
        value = json.loads(line)
        return value if isinstance(value, dict) and isinstance(value.get("token"), str) else None
    except ValueError:
        return None

lines = [l for l in map(parsed, open("examples/sample-tokens.ndjson")) if l]
tokens = [l["token"] for l in lines if l["token"].count(".") == 2]
for token in tokens:
    add("jws", token)
    try:
        add("claims", b64decode(token.split(".")[1]))
    except Exception:
        pass
    add("http-request", b"\x00" + json.dumps({"provider": "apple", "token": token, "nonce": "d8f1f8c0-sample-raw-nonce"}).encode())
add("http-request", b"\x01" + json.dumps({"items": [{"provider": l.get("provider"), "token": l["token"]} for l in lines[:4]]}).encode())
add("http-request", b"\x00" + json.dumps({"provider": "corp", "token": "x.y.z", "explain": True, "nonce": None}).encode())

for path in sorted(glob.glob("examples/*-jwks.json")):
    add("jwks", open(path, "rb").read())
for path in sorted(glob.glob("../shared/jwks-snapshots/*.json")):
    document = json.load(open(path))
    if isinstance(document.get("jwks"), dict):
        add("jwks", json.dumps(document["jwks"]))

add("config", open("examples/tokenguard.yaml").read())
add("config", open("deploy/tokenguard.example.yaml").read())
add("config", "listen: 127.0.0.1:8080\nreplay: {store: memory, max_entries: 1000}\nserver: {max_batch_items: 10}\n"
    "providers:\n  ms: {kind: microsoft, audiences: [a], tenants: ['*'], jwks_file: x.json}\n")

sample = open("examples/sample-tokens.ndjson", "rb").read()
add("batch", bytes([255, 255]) + sample)
add("batch", bytes([4, 2]) + b'{"id":1,"provider":"apple","token":"a.b.c"}\r\n\n{"id":[1]}\nnot json\n{"provider":"corp"')
add("batch", bytes([255, 1]) + b"\n".join(sample.split(b"\n")[:3]))

for target, files in seeds.items():
    os.makedirs(f"{root}/{target}", exist_ok=True)
    for name, data in files.items():
        open(f"{root}/{target}/{name}", "wb").write(data)
    print(f"{target}: {len(files)} seeds")
