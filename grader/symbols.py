"""The symbol check: what the compiled student code calls, not how its source spells it.

A submission's code runs inside the test programs, so what it can do there is whatever its
object file can call. After the build, every symbol each student object references (nm -u) is
demangled and held against the allowlist in grader/symbols.json (first matching rule decides;
no match is a finding). On top of that, for each student object:

  * given code that the rules deny (files, programs, the measuring instruments): a kit:: function defined in a given
    object that itself references a denied symbol (a checkpoint loader, the rank JSON writer,
    the launcher's Command) is denied too, unless symbols.json's "kit_exceptions" names it
    (Problem 1's launcher: kit::Process(rank, world size, rendezvous), start, join_all);
  * definitions: a student object may define global symbols only in namespace kit or in the
    global namespace as C++ functions; an extern "C" definition (write, main, malloc), a
    replacement of operator new/delete, anything in namespace testing, std, at, c10 or torch
    defined non-weakly, or a symbol that given or test code also defines, could replace what
    the test program relies on, and is a finding;
  * instructions: a syscall / sysenter / int $0x80 instruction in the object (inline assembly)
    is a finding.

    python3 grader/symbols.py OBJECT.o [SOURCE.cpp] [--given BUILD_DIR]   # prints the findings
    python3 grader/symbols.py --audit BUILD    # the solutions and starter stubs of a solution build
"""
import argparse
import functools
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpp_source import strip_comments  # noqa: E402
from objects import file_object, given_objects  # noqa: E402
from rubric import all_student_files  # noqa: E402

RULES_FILE = Path(__file__).resolve().parent / "symbols.json"
WRAPPERS = re.compile(r"^(vtable for |typeinfo for |typeinfo name for |VTT for |construction vtable for "
                      r"|guard variable for |TLS init function for |TLS wrapper function for |"
                      r"reference temporary #\d+ for |non-virtual thunk to |virtual thunk to |covariant return thunk to )+")
# Namespaces whose non-weak definitions in a student object would replace library code.
FOREIGN_NAMESPACES = ("testing::", "std::", "__gnu_cxx::", "__cxxabiv1::", "at::", "c10::", "torch::",
                      "caffe2::", "c10d::", "gloo::", "nlohmann::", "CLI::")


@functools.lru_cache(maxsize=None)
def load_rules(path=RULES_FILE):
    """(rules [(kind, regex, why, given)], kit exceptions [regex])."""
    spec = json.loads(Path(path).read_text())
    rules = []
    for r in spec["rules"]:
        kind = "deny" if "deny" in r else "allow"
        rules.append((kind, re.compile(r[kind]), r["why"], bool(r.get("given"))))
    exceptions = [re.compile(x) for x in spec.get("kit_exceptions", [])]
    return rules, exceptions


def demangle(names, bare=False):
    """{mangled: demangled} in one c++filt call; bare: the qualified name alone (c++filt -p: no
    return type, no parameters), which is what the rules judge: a template function's return
    type comes first in the full name and must not decide (kit::X testing::f<...>() is testing's)."""
    names = sorted(set(names))
    if not names:
        return {}
    out = subprocess.run(["c++filt"] + (["-p"] if bare else []), input="\n".join(names) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def nm(obj: Path):
    """[(mangled name, type letter)] of every symbol in obj (posix format: name type value size)."""
    r = subprocess.run(["nm", "-P", str(obj)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nm {obj} failed: {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out.append((parts[0], parts[1]))
    return out


def judge(demangled: str):
    """('allow' | 'deny' | None, why) for one demangled name; None: on no list."""
    return judge_full(demangled)[:2]


def judge_full(demangled: str):
    """(kind, why, given): given says whether the deciding rule also denies given code that calls it."""
    rules, _ = load_rules()
    name = WRAPPERS.sub("", demangled)
    for kind, rx, why, given in rules:
        if rx.search(name):
            return kind, why, given
    return None, "not on the allowlist (grader/symbols.json)", False


def undefined(obj: Path):
    return sorted({n for n, t in nm(obj) if t in ("U", "w", "v")})


def global_definitions(obj: Path):
    """[(mangled, type)] of the global symbols obj defines (weak ones with W/V/u)."""
    return [(n, t) for n, t in nm(obj) if t in ("T", "D", "B", "R", "W", "V", "u", "C", "G", "S", "i")]


def syscall_instructions(obj: Path):
    """Lines of objdump's disassembly that make a system call directly."""
    r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True)
    return [l.strip() for l in r.stdout.splitlines()
            if re.search(r"\t(syscall|sysenter|int\s+\$0x80|svc\s+#?0)\b", l)]


def references_by_function(obj: Path):
    """{function (mangled): names it calls or uses}, from the disassembly: the relocations in its
    code (a part the compiler split off, "f.cold", counts as f's) and the functions it calls
    directly at their entry (a static helper in the same object is called without relocation)."""
    r = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", str(obj)], capture_output=True, text=True)
    out, current = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            current = re.sub(r"\.cold(\.\d+)?$", "", m.group(1))
            out.setdefault(current, set())
            continue
        if current is None:
            continue
        m = re.search(r"\sR_[A-Z0-9_]+\s+(\S+)$", line)
        if m:
            out[current].add(re.sub(r"[-+]0x[0-9a-f]+$", "", m.group(1)).split("@")[0])
            continue
        m = re.search(r"\tcall\s+[0-9a-f]+ <([^>+]+)>$", line)
        if m and m.group(1) != current:
            out[current].add(m.group(1))
    return out


class GivenCode:
    """What the given code (and the tests) of a build define, and which of the given kit::
    functions student code may not call: those that call a symbol a "given" rule denies (files,
    processes, the measuring instruments), directly or through other functions of the given code."""

    @classmethod
    def cached(cls, objects, cache: Path):
        """The same, kept in `cache` (JSON) while the objects and the rules are unchanged: the
        given code is the same for every submission graded in one work dir."""
        key = hashlib.sha256(RULES_FILE.read_bytes())
        for o in objects:
            st = o.stat()
            key.update(f"{o}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        key = key.hexdigest()
        try:
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                self = cls.__new__(cls)
                self.defined = data["defined"]
                self.io_defined = {k: tuple(v) for k, v in data["io_defined"].items()}
                return self
        except (OSError, ValueError, KeyError):
            pass
        self = cls(objects)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "defined": {k: str(v) for k, v in self.defined.items()},
                                   "io_defined": {k: [str(o), w] for k, (o, w) in self.io_defined.items()}}))
        tmp.replace(cache)
        return self

    def __init__(self, objects, code_objects=None):
        """objects: every given and test object (for redefinitions); code_objects: the given
        code's own (for the call graph; default: those not under a tests/ directory)."""
        self.defined, self.io_defined = {}, {}
        _, exceptions = load_rules()
        code_objects = [o for o in objects if "/tests/" not in str(o)] if code_objects is None else code_objects
        for o in objects:
            for n, t in nm(o):
                if t not in ("U", "w", "v", "t", "d", "b", "r"):
                    self.defined.setdefault(n, o)
        calls = {}
        for o in code_objects:
            for fn, refs in references_by_function(o).items():
                calls.setdefault(fn, (o, set()))[1].update(refs)
        names = set(calls) | {r for _, refs in calls.values() for r in refs}
        dem, bare = demangle(names), demangle(names, bare=True)
        bad = {}  # function -> the denied symbol it reaches
        for fn, (o, refs) in calls.items():
            for r in sorted(refs):
                kind, why, given = judge_full(bare.get(r, r))
                if kind == "deny" and given:
                    bad[fn] = (dem.get(r, r), why)
                    break
        changed = True
        while changed:  # through other functions of the given code
            changed = False
            for fn, (o, refs) in calls.items():
                if fn not in bad:
                    hit = next((r for r in sorted(refs) if r in bad), None)
                    if hit:
                        bad[fn] = bad[hit]
                        changed = True
        for fn, what in bad.items():
            d = dem.get(fn, fn)
            if bare.get(fn, fn).startswith("kit::") and not any(x.search(d) for x in exceptions):
                self.io_defined[fn] = (calls[fn][0], what)


def source_lines(source: Path, demangled: str):
    """Lines of the source (comments and strings blanked) naming the symbol's function or
    class name: where the compiler's output cannot say, the likeliest places."""
    if source is None or not source.is_file():
        return []
    base = WRAPPERS.sub("", demangled).split("(")[0]
    words = [w for w in re.findall(r"[A-Za-z_]\w*", base) if w not in ("std", "kit", "__cxx11", "char",
                                                                         "operator", "const", "unsigned")]
    words = [w.lstrip("_") or w for w in words[-2:]]
    try:
        code = strip_comments(source.read_text(errors="replace"))  # the same lexer as the source checks
    except Exception:
        code = source.read_text(errors="replace")
    found = []
    for n, line in enumerate(code.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue  # an #include names the header, not the call
        if any(re.search(r"(?<![\w])_*" + re.escape(w) + r"(?!\w)", line) for w in words if len(w) > 1):
            found.append(n)
    return found[:5]


def findings_of(obj: Path, source: Path = None, given: GivenCode = None):
    """[(line or None, symbol, why)] for one student object file."""
    out = []
    und = undefined(obj)
    defs = global_definitions(obj)
    dem = demangle(und + [n for n, _ in defs])
    bare = demangle(und + [n for n, _ in defs], bare=True)
    for n in und:
        d = dem[n]
        kind, why = judge(bare[n])
        if kind == "allow" and given is not None and n in given.io_defined:
            o, what = given.io_defined[n]
            kind, why = "deny", (f"given code that the rules deny ({Path(o).name} calls {what[0].split('(')[0]}: "
                                 f"{what[1]})")
        if kind != "allow":
            lines = source_lines(source, d)
            out.append((lines[0] if lines else None, d, ("denied: " if kind else "") + why))
    for n, t in defs:
        d = dem[n]
        weak = t in ("W", "V", "u")
        if not n.startswith("_Z"):
            if n.startswith(("__", "_GLOBAL")) or "." in n:  # the compiler's own (DW.ref.*, .L*)
                if not weak:  # compiler-made names are local or weak
                    out.append((None, d, "defines a reserved name"))
                continue
            why = "defines an extern \"C\" symbol, which would replace the C library's or the program's own"
        elif re.match(r"^_Z(n[wa]|d[la])", n):
            why = "replaces the global operator new or delete (the kit counts memory through them)"
        elif bare[n].startswith("testing::") or (not weak and bare[n].startswith(FOREIGN_NAMESPACES)):
            why = "defines a symbol in a library's namespace, which would replace the library's own"
        elif not weak and given is not None and n in given.defined:
            why = f"defines a symbol that given or test code also defines ({Path(given.defined[n]).name})"
        else:
            continue
        lines = source_lines(source, d)
        out.append((lines[0] if lines else None, d, why))
    for ins in syscall_instructions(obj):
        out.append((None, ins, "a system call instruction (inline assembly)"))
    return out


def audit(build: Path, kit: Path, verbose=False):
    """The check on a solution build (-DKIT_SOLUTION=ON, as CI builds it): every assignment's
    reference solution objects and starter stub objects. Returns (findings, report lines)."""
    files = all_student_files(kit)
    given = GivenCode(given_objects(build))
    findings, lines, used = [], [], {"solution": {}, "starter": {}}
    for f in files:
        for side in ("solution", "starter"):
            obj = file_object(build, f"{side}/{f}")
            if not obj:
                findings.append(f"{side} {f}: no object in {build} (build it with -DKIT_SOLUTION=ON)")
                continue
            for line, sym, why in findings_of(obj, kit / side / f, given):
                findings.append(f"{side} {f}:{line or '?'}: {sym}: {why}")
            names = demangle(undefined(obj), bare=True)
            for d in names.values():
                used[side].setdefault(d, set()).add(f)
    only = sorted(set(used["solution"]) - set(used["starter"]))
    by_rule = {}
    for d in only:
        by_rule.setdefault(judge(d)[1], []).append(d)
    lines.append(f"{len(files)} student files, solution and starter: {len(findings)} finding(s)")
    lines.append(f"symbols only the reference solutions reference ({len(only)}), by the rule that allows them:")
    for why, names in sorted(by_rule.items(), key=lambda kv: -len(kv[1])):
        shown = names if verbose else [n for n in names if not n.startswith(("at::", "c10::", "torch::", "std::",
                                                                               "vtable", "typeinfo"))][:12]
        lines.append(f"  {len(names):4d}  {why}" + (": " + ", ".join(shown) if shown else ""))
    return findings, lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object", type=Path, nargs="?")
    ap.add_argument("source", type=Path, nargs="?")
    ap.add_argument("--given", type=Path, help="a build directory: also check against its given code")
    ap.add_argument("--audit", type=Path, metavar="BUILD",
                    help="check every assignment's reference solution and starter objects in a -DKIT_SOLUTION=ON "
                         "build; exit 1 on any finding; list what only the solutions needed")
    ap.add_argument("--verbose", action="store_true", help="with --audit: every symbol, not a sample")
    args = ap.parse_args(argv)
    if args.audit:
        findings, lines = audit(args.audit.resolve(), Path(__file__).resolve().parent.parent, args.verbose)
        print("\n".join(findings + lines))
        return 1 if findings else 0
    if not args.object:
        ap.error("name an object file, or --audit BUILD")
    given = None
    if args.given:
        given = GivenCode(given_objects(args.given))
    found = findings_of(args.object, args.source, given)
    for line, sym, why in found:
        print(f"{args.source or args.object}:{line or '?'}: {sym}: {why}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
