#!/usr/bin/env python3
"""A build with KIT_PREBUILT links another build's objects only where that build's manifest
(kit_objects.json, cmake/Objects.cmake) says it compiled the same sources. A small CMake project
(no compiler: a configure takes a fraction of a second) reads a manifest through the kit's own
functions, first as written (it lends the objects), then changed in each way that would mix
objects of other code: each must stop the configure and name the fix. That the kit's builds
write manifests their readers accept, the grader's self-tests with --prebuilt show (they
configure with KIT_PREBUILT).

    python3 grader/tests/prebuilt_check.py
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent.parent

PROJECT = """cmake_minimum_required(VERSION 3.22)
project(prebuilt_check NONE)
set(KIT_PREBUILT "{prebuilt}")
set(CMAKE_UNITY_BUILD ON)
set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)
include("{kit}/cmake/Objects.cmake")
set_source_files_properties("${{CMAKE_SOURCE_DIR}}/b.cpp" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
kit_prebuilt_objects(objs lib "${{CMAKE_SOURCE_DIR}}/a.cpp" "${{CMAKE_SOURCE_DIR}}/b.cpp")
kit_prebuilt_file_object(one "starter/x.cpp")
kit_prebuilt_file_object(none "starter/y.cpp")
message(STATUS "LENT [${{objs}}] [${{one}}] [${{none}}]")
"""


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, prebuilt = tmp / "src", tmp / "prebuilt"
        src.mkdir()
        prebuilt.mkdir()
        objects = [str(prebuilt / n) for n in ("unity_0.o", "b.o", "x.o")]
        for o in objects:
            Path(o).write_bytes(b"")
        (src / "CMakeLists.txt").write_text(PROJECT.format(prebuilt=prebuilt, kit=KIT))
        good = {"format": "kit objects 1", "source_dir": str(src), "unity": "ON", "unity_batch": "8",
                "targets": {"lib": {"folder": "", "sources": ["a.cpp", "b.cpp"], "apart": ["b.cpp"],
                                    "objects": objects[:2]}},
                "files": {"starter/x.cpp": {"target": "kit_file_x", "objects": objects[2:]}}}

        def changed(**edits):
            m = json.loads(json.dumps(good))
            for path, value in edits.items():
                *where, last = path.split("__")
                node = m
                for key in where:
                    node = node[key]
                node[last] = value
            return m

        lent = f"LENT [{';'.join(objects[:2])}] [{objects[2]}] []"
        cases = [  # (what, the manifest or None, what the configure must say, whether it fails)
            ("as written", good, lent, False),
            ("no manifest", None, "has no kit_objects.json", True),
            ("another format", changed(format="kit objects 0"), "is not a kit object manifest", True),
            ("no such target", changed(targets={}), "has no target lib", True),
            ("other sources", changed(targets__lib__sources=["a.cpp", "c.cpp"]), "the same sources", True),
            ("other sources apart", changed(targets__lib__apart=[]), "the same sources", True),
            ("other unity batches", changed(unity_batch="4"), "the same sources", True),
            ("no unity build", changed(unity="OFF"), "the same sources", True),
            ("an object missing", changed(targets__lib__objects=objects[:1] + [str(prebuilt / "gone.o")]),
             "gone.o (lib's)", True),
            ("a file's object missing",
             changed(files={"starter/x.cpp": {"target": "t", "objects": [str(prebuilt / "gone.o")]}}),
             "gone.o (the object of starter/x.cpp)", True),
        ]
        for k, (what, manifest, expect, fails) in enumerate(cases):
            path = prebuilt / "kit_objects.json"
            if manifest is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(json.dumps(manifest))
            r = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp / f"build{k}")], capture_output=True, text=True,
                               timeout=120)
            text = " ".join((r.stdout + r.stderr).split())
            if (r.returncode != 0) != fails or expect not in text:
                failures.append(f"{what}: expected {'a failed' if fails else 'a'} configure saying {expect!r}, "
                                f"got rc {r.returncode}:\n{(r.stdout + r.stderr)[-2000:]}")
            print(f"{what}: rc {r.returncode}", flush=True)
    if failures:
        print("\n\n".join(failures))
        return 1
    print("PREBUILT_OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
