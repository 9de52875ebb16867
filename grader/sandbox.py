"""Run untrusted test programs so that nothing they do outlives them or speaks for them.

A submission's code runs inside the test programs, so the grader trusts nothing those
processes print, write or return. Each case runs like this:

  * Verdicts: the grader makes a fresh random token per run and hands it over a pipe;
    tests/kit_gtest_main.cpp copies it (tee(2), never reading it into memory) into
    "KIT-VERDICT <token> PASS|FAIL|SKIP <case>" on a second pipe after the case's body ended,
    and "... END <n>" after GoogleTest finished. A case passes only when the pipe carries
    exactly those two lines; any other line voids it. Exit statuses, stdout and report files
    count for nothing.
  * Containment, strongest first (chosen once, by what this machine allows):
      root:      a PID namespace (when the program's main process ends, the kernel kills
                 every process it left, setsid and double forks included) and a separate
                 unprivileged user per parallel slot (no write access to the grader's files,
                 results.json or the work dir; every process of that user is killed after
                 each case, which also covers machines where namespaces are refused).
      non-root:  a user + PID namespace (processes contained as above; files are not:
                 grade untrusted code as root, as Gradescope does).
      fallback:  the grader becomes a child subreaper, so orphans are re-parented to it
                 and killed after each case (said in the output).
  * Limits: a wall-clock timeout per case, at most NPROC processes per sandbox user,
    FSIZE bytes per written file, no core files, the parent's death kills the case.
"""
import ctypes
import fcntl
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

SANDBOX_UID = int(os.environ.get("KIT_GRADER_SANDBOX_UID", "64190"))  # slot k runs as uid + k
USERS_STEP = 64            # the ranges of sandbox users gradings on one machine choose from
NPROC = 1024               # tasks (threads count) per sandbox user: bounds fork bombs
FSIZE = 256 * 1024 ** 2    # bytes per file a case may write (its output included)
OUTPUT_KEEP = 64 * 1024    # bytes of a case's output kept for the report (the end)
VERDICT_MAX = 1024 * 1024  # bytes read from the verdict pipe
RECORDS_MAX = 256 * 1024 ** 2  # bytes read of a subject's records (tests/judge/judge.h: kMaxStreamBytes)
# Variables of the grader's own environment that a case never inherits: the channel, and the
# subject/judge plumbing (tests/judge/judge.h), which run() sets itself where it means to.
PRIVATE_ENV = ("KIT_GRADER", "KIT_SUBJECT_", "KIT_JUDGE_", "KIT_RANK_RECORDS")
PR_SET_CHILD_SUBREAPER = 36


LOCK_DIR = "/tmp/kit-grader-users"  # the sandbox users' locks: a directory only root writes
_held_users = {}  # this process's range of sandbox users: {"base": first uid, "file": its lock}


def _lock_dir() -> str:
    """LOCK_DIR, made by us (root) and writable by nobody else. A sandbox user may write /tmp:
    a LOCK_DIR that is not ours is put aside and made again."""
    for _ in range(20):
        try:
            os.mkdir(LOCK_DIR, 0o700)
        except FileExistsError:
            pass
        try:
            st = os.lstat(LOCK_DIR)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
                return LOCK_DIR
            os.rename(LOCK_DIR, f"{LOCK_DIR}.not-ours-{secrets.token_hex(4)}")
        except FileNotFoundError:
            pass
    raise RuntimeError(f"cannot make {LOCK_DIR} a directory of the grader's own")


def _hold_users(slots: int) -> int:
    """The first uid of a range of sandbox users that this process holds for its lifetime: the
    first of SANDBOX_UID, SANDBOX_UID + USERS_STEP, ... whose lock (LOCK_DIR/<uid>.lock, flock)
    no other process on this machine holds. A sandbox kills every process of its users after
    each case, so two gradings on one set of users would stop each other's cases: with this,
    gradings started side by side (a batch regrade, ctest) each get users of their own."""
    if slots > USERS_STEP:
        raise ValueError(f"at most {USERS_STEP} parallel slots per grading (asked for {slots})")
    if _held_users:
        return _held_users["base"]
    folder = _lock_dir()
    for k in range(64):
        base = SANDBOX_UID + k * USERS_STEP
        fd = os.open(f"{folder}/{base}.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _held_users.update(base=base, file=fd)
        return base
    raise RuntimeError(f"64 gradings on this machine already hold the sandbox users from uid {SANDBOX_UID} on; "
                       "wait for one to end, or set KIT_GRADER_SANDBOX_UID to a free range")


def _works(cmd) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class Sandbox:
    """Chooses the containment once; run() runs one program in it."""

    def __init__(self, slots: int = 1, separate_users: bool = True):
        # separate_users=False (a student grading their own build): as root too, the cases run
        # as the caller, in namespaces only, so they can reach a build under /root.
        self.root = os.geteuid() == 0 and separate_users
        self.slots = max(1, slots)
        self.uid0 = _hold_users(self.slots) if self.root else SANDBOX_UID  # slot k runs as uid0 + k
        ns = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
        if not self.root:
            ns = ["unshare", "--map-root-user"] + ns[1:]
        self.ns = ns if shutil.which("unshare") and _works(ns + ["true"]) else []
        self.has_tools = all(shutil.which(t) for t in ("setpriv", "prlimit"))
        if not self.ns:  # orphans come back to us instead of init, so they can be found
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.lock = threading.Lock()
        self.free = list(range(self.slots))
        self.running = set()  # pids of the cases now running (the fallback must not kill them)

    def describe(self) -> str:
        parts = []
        if self.root:
            parts.append(f"separate users (uid {self.uid0}..{self.uid0 + self.slots - 1})")
        parts.append("a PID namespace per case" if self.ns else
                     "no namespaces on this machine: orphans are re-parented to the grader and killed")
        if not self.root:
            parts.append("not root: a submission can write what the grader's user can "
                         "(grade untrusted code as root)")
        return "sandbox: " + "; ".join(parts)

    # -------------------------------------------------------------- one case
    def run(self, argv, cwd_parent: Path, timeout: float, channel: bool = True, keep: int = OUTPUT_KEEP,
            subject: bool = False, env=None):
        """Runs argv in a fresh directory under cwd_parent. Returns a dict: records (verdict
        lines carrying this run's token, as (kind, rest) pairs), output (the end of stdout and
        stderr), exit (status, -N for signal N), timed_out, seconds. subject: the program is a
        case's subject (tests/judge/judge.h), handed a pipe for its records
        (KIT_SUBJECT_RECORDS); what it wrote there, at most RECORDS_MAX bytes, is in
        "subject_records". env: more variables."""
        slot = self._take_slot()
        try:
            return self._run(argv, cwd_parent, timeout, channel, slot, keep, subject, env or {})
        finally:
            with self.lock:
                self.free.append(slot)

    def _take_slot(self):
        while True:
            with self.lock:
                if self.free:
                    return self.free.pop()
            time.sleep(0.01)

    def _prefix(self, uid):
        p = []
        if self.has_tools:
            p += ["setpriv", "--pdeathsig", "KILL", "--", "prlimit", "--fsize=%d" % FSIZE, "--core=0"]
            if self.root:
                p.append("--nproc=%d" % NPROC)
            p.append("--")
        p += self.ns
        if self.root:
            p += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                  "--no-new-privs", "--pdeathsig", "KILL", "--"]
        return p

    def _run(self, argv, cwd_parent, timeout, channel, slot, keep, subject, more_env):
        token = secrets.token_hex(16)
        env, fds, reader, kept, subject_reader = dict(more_env), [], None, None, None
        if subject:
            rec_r, rec_w = os.pipe()
            env["KIT_SUBJECT_RECORDS"] = str(rec_w)
            fds.append(rec_w)
            subject_reader = _Reader(rec_r, RECORDS_MAX)
        if channel:
            tok_r, tok_w = os.pipe()
            ver_r, ver_w = os.pipe()
            os.write(tok_w, token.encode())  # 32 bytes: always fits in the pipe
            os.close(tok_w)
            kept = os.dup(tok_r)  # to see afterwards that nobody took the token out
            env["KIT_GRADER_CHANNEL"] = f"{tok_r}:{ver_w}"
            fds += [tok_r, ver_w]
            reader = _Reader(ver_r)
        t0 = time.time()
        try:
            handle = self.start(argv, cwd_parent, slot, pass_fds=fds, env=env)
        finally:
            for fd in fds:
                os.close(fd)  # the child holds them now; EOF comes when all its writers are gone
        output = self.finish(handle, wait=timeout, keep=keep)
        seconds = time.time() - t0
        records = reader.finish(token) if reader else []
        if kept is not None and not _token_left(kept, token):
            # The kit copies the token with tee(2) and never consumes it: whoever read it out
            # of its pipe was not the kit, and whatever the pipe says is void.
            records.append(("TAKEN", ""))
        out = {"records": records, "output": output, "exit": handle["proc"].returncode,
               "timed_out": handle["timed_out"], "seconds": seconds}
        if subject_reader:
            out["subject_records"] = subject_reader.data_after_eof()
        return out

    # -------------------------------------------------------------- a program, started and finished
    def start(self, argv, cwd_parent: Path, slot: int, pass_fds=(), env=None):
        """Starts argv as sandbox slot `slot` in a fresh directory under cwd_parent and returns
        at once: a handle for signal() and finish(). run() uses it for a case; the speed gates
        (grader/perf_gates.py) talk to a program while it runs. The caller keeps that slot for
        itself until finish()."""
        uid = self.uid0 + slot
        home = Path(tempfile.mkdtemp(prefix="case-", dir=cwd_parent))
        if self.root:
            os.chown(home, uid, uid)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_ENV)}
        full_env.update(HOME=str(home), TMPDIR=str(home), PWD=str(home))
        full_env.update(env or {})
        out_file = tempfile.TemporaryFile(dir=cwd_parent)
        # Started and registered under the lock: without namespaces, another slot's sweep kills
        # every child of the grader that is not in `running`, and a case it saw between fork
        # and registration would die with it (a wrong grade, not a crash).
        with self.lock:
            p = subprocess.Popen(self._prefix(uid) + [str(a) for a in argv], cwd=home, env=full_env,
                                 stdin=subprocess.DEVNULL, stdout=out_file, stderr=subprocess.STDOUT,
                                 pass_fds=pass_fds, start_new_session=True)
            self.running.add(p.pid)
        return {"proc": p, "uid": uid, "home": home, "out": out_file, "timed_out": False}

    def signal(self, handle, sig):
        """Sends sig to every process of a started program: its tree, and (as root) every
        process of its user, so that one that left the tree is reached too."""
        # Not the sandbox's own wrapper (the program's parent: unshare waiting for it), which a
        # stop and continue can upset.
        pids = set(_descendants(handle["proc"].pid)) - {handle["proc"].pid}
        if self.root:
            pids.update(_pids_of_uid(handle["uid"]))
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def finish(self, handle, wait: float = 0, keep: int = OUTPUT_KEEP) -> str:
        """Waits at most `wait` seconds for a started program to end (handle["timed_out"] says
        whether it had to be stopped), then kills all of it; returns the end of its output."""
        p = handle["proc"]
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            handle["timed_out"] = True
        finally:
            _killpg(p.pid)
            p.wait()
            with self.lock:
                self.running.discard(p.pid)
            self.sweep(handle["uid"])
        out_file = handle["out"]
        out_file.seek(0, os.SEEK_END)
        size = out_file.tell()
        out_file.seek(max(0, size - keep))
        output = out_file.read().decode(errors="replace")
        out_file.close()
        if size > keep:
            output = f"[... {size - keep} bytes of output left out]\n" + output[output.find("\n") + 1:]
        shutil.rmtree(handle["home"], ignore_errors=True)
        return output

    # -------------------------------------------------------------- cleaning up
    def sweep(self, uid=None):
        """Kills whatever a case left behind (the PID namespace already did, where there is one)."""
        if self.root:
            uids = [uid] if uid is not None else [self.uid0 + k for k in range(self.slots)]
            for u in uids:
                for _ in range(50):  # kill(-1) as that user: every process it owns, atomically
                    if not _pids_of_uid(u):
                        break
                    subprocess.run(["setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups", "--",
                                    "kill", "-KILL", "-1"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        if not self.ns:
            for _ in range(50):  # orphans re-parented to us that no running case owns
                with self.lock:
                    mine = [pid for pid in _children(os.getpid()) if pid not in self.running]
                if not mine:
                    break
                for pid in mine:
                    _killpg(pid)
                    try:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    except (ProcessLookupError, ChildProcessError):
                        pass

    def unreachable(self, path: Path):
        """The first directory on the way to path that the sandbox users cannot enter, or None."""
        if not self.root:
            return None
        for d in reversed([path.resolve()] + list(path.resolve().parents)):
            if d.exists() and not os.stat(d).st_mode & 0o001:
                return d
        return None

    def leftovers(self):
        """Processes of the sandbox users still alive (must be none after a case)."""
        if not self.root:
            return []
        return [pid for k in range(self.slots) for pid in _pids_of_uid(self.uid0 + k)]


class _Reader(threading.Thread):
    """Reads the verdict pipe until EOF or until told to stop (select, so never stuck)."""

    def __init__(self, fd, limit=VERDICT_MAX):
        super().__init__(daemon=True)
        self.fd, self.data, self.stop, self.limit = fd, bytearray(), threading.Event(), limit
        self.start()

    def data_after_eof(self) -> bytes:
        """Everything read (at most the limit), once every writer is gone."""
        self.join(timeout=5)
        self.stop.set()
        self.join()
        return bytes(self.data[:self.limit])

    def run(self):
        try:
            while not self.stop.is_set() and len(self.data) < self.limit:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready:
                    chunk = os.read(self.fd, 65536)
                    if not chunk:
                        break
                    self.data += chunk
        finally:
            os.close(self.fd)

    def finish(self, token):
        """Every line the pipe carried, classified: (kind, rest) with kind PASS, FAIL, SKIP or
        END for a line signed with this run's token, FAILURE for "KIT-FAILURE <case>" (the kit
        writes it, unsigned, the moment an assertion fails), and FOREIGN (rest: the line) for
        anything else: a line the kit's main() never writes, which voids the run's verdict. run()
        adds TAKEN when the token was no longer in its pipe afterwards."""
        self.join(timeout=5)  # every writer is dead by now: EOF is immediate
        self.stop.set()
        self.join()
        records = []
        text = bytes(self.data).decode(errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the honest stream ends with a newline
        for line in lines:
            parts = line.split(" ", 3)
            signed = len(parts) == 4 and parts[0] == "KIT-VERDICT" and secrets.compare_digest(parts[1].encode(), token.encode())
            if signed and (parts[2] in ("PASS", "FAIL", "SKIP") or (parts[2] == "END" and parts[3].isdigit())):
                records.append((parts[2], parts[3]))
            elif line.startswith("KIT-FAILURE ") and len(line) > len("KIT-FAILURE "):
                records.append(("FAILURE", line[len("KIT-FAILURE "):]))
            else:
                records.append(("FOREIGN", line[:200]))
        return records


def _token_left(fd, token) -> bool:
    """Whether the token pipe (every other holder gone) still holds exactly the token; closes fd."""
    try:
        os.set_blocking(fd, False)
        data = b""
        while len(data) < 4096:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        return data == token.encode()
    finally:
        os.close(fd)


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_files(name):
    """(pid, text of /proc/<pid>/<name>) for every process, one pass over /proc; a process
    that ends meanwhile is passed over."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                text = Path(f"/proc/{d}/{name}").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            yield int(d), text


def _pids_of_uid(uid):
    """Processes whose real uid is uid. Read from /proc/<pid>/status, not the owner of
    /proc/<pid>: a non-dumpable process (the test programs make themselves so under the
    grader, and a submission could) shows as owned by root there."""
    pids = []
    for pid, status in _proc_files("status"):
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if int(line.split()[1]) == uid:
                    pids.append(pid)
                break
    return pids


def _parents():
    """{pid: parent pid} of every process (one pass over /proc)."""
    out = {}
    for pid, stat in _proc_files("stat"):
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            out[pid] = int(fields[1])
    return out


def _descendants(pid):
    """pid and every process below it."""
    kids = {}
    for child, parent in _parents().items():
        kids.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _children(ppid):
    return [child for child, parent in _parents().items() if parent == ppid]
