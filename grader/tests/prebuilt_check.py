#!/usr/bin/env python3
"""A build with KIT_PREBUILT links another build's objects only where that build's manifest
(kit_objects.json, cmake/Objects.cmake) says it compiled the same sources: configure against a
copy of a finished build's cache and manifest, first as it is (it configures), then with the
manifest changed in each way that would mix objects of other code (each must stop the configure
and name the fix).

    python3 grader/tests/prebuilt_check.py BUILD      # BUILD: a finished build of this tree
"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent.parent


def configure(prebuilt: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["cmake", "-S", str(KIT), "-B", str(out), "-DKIT_SOLUTION=OFF", "-DKIT_TESTS=OFF",
                           "-DKIT_PLOTS=OFF", "-DCMAKE_BUILD_TYPE=Release", f"-DKIT_PREBUILT={prebuilt}"],
                          capture_output=True, text=True, timeout=300)


def main(argv):
    build = Path(argv[1]).resolve()
    original = json.loads((build / "kit_objects.json").read_text())
    given = original["targets"]["kit_given"]

    def drop_a_source(m):
        m["targets"]["kit_given"]["sources"] = given["sources"][:-1]

    def another_batching(m):
        m["unity_batch"] = str(int(m["unity_batch"]) + 1)

    def a_missing_object(m):
        m["targets"]["kit_given"]["objects"] = given["objects"] + [str(build / "no_such_object.o")]

    cases = [  # (what, change to the manifest or None to remove it, what the error must say)
        ("as built", lambda m: None, None),
        ("no manifest", None, "has no kit_objects.json"),
        ("kit_given compiled other sources", drop_a_source, "build both trees from the same sources"),
        ("other unity batches", another_batching, "build both trees from the same sources"),
        ("an object missing", a_missing_object, "no_such_object.o (kit_given's)"),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (what, change, expect) in enumerate(cases):
            fake = Path(tmp) / f"prebuilt{k}"
            fake.mkdir()
            shutil.copy(build / "CMakeCache.txt", fake / "CMakeCache.txt")
            if change is not None:
                m = json.loads(json.dumps(original))
                change(m)
                (fake / "kit_objects.json").write_text(json.dumps(m))
            r = configure(fake, Path(tmp) / f"build{k}")
            text = r.stdout + r.stderr
            if expect is None and r.returncode != 0:
                failures.append(f"{what}: the configure failed:\n{text[-2000:]}")
            elif expect is not None and (r.returncode == 0 or expect not in " ".join(text.split())):
                failures.append(f"{what}: expected a failed configure saying {expect!r}, got rc {r.returncode}:\n"
                                f"{text[-2000:]}")
            print(f"{what}: rc {r.returncode}" + ("" if expect is None else f", says {expect!r}"), flush=True)
    if failures:
        print("\n\n".join(failures))
        return 1
    print("PREBUILT_OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
