"""Process sandbox for model-generated Python: pre-started workers that fork one sandboxed child per sample.

Processes: supervisor (the host: verl RewardLoopWorker, Ray actor, OpenRLHF) -> worker W (``Popen`` of a
fresh interpreter, own session, scrubbed env; the fork server, it never reads a job) -> job process M (forked
once from W; reads every job) and one sandboxed child per job (forked by W ahead of its job, so it holds no
other job's data), which runs every test of the job; a fresh child only after a crash or an unusable state.

Layers of a child, in order: new session; only its stdio memfds, the result pipe and the interpreter-dir
``O_PATH`` descriptors survive; private temp dir as cwd; rlimits (AS, CPU, FSIZE, NOFILE, NPROC, STACK,
CORE); uid drop to the job's per-slot uid with no capability left (root hosts); parent-death signal and
non-dumpable; no-new-privs + landlock (reads: interpreter and library dirs, writes: the temp dir, no TCP,
signal and abstract-socket scoping); seccomp (see ``seccomp_bpf``). Then a "ready" record; only records
before it can report an infrastructure failure.

Modules (all stdlib-only, they also run inside the worker process):
  seccomp_bpf  hand-written seccomp-BPF filter (deny fork/exec/sockets/ptrace/IPC/acting on other pids, ...)
  landlock     filesystem (read allowlist, write only the private tmp dir), TCP and signal scoping
  limits       rlimits, uid drop (no capabilities kept), no-new-privs, parent-death signal
  child        what a forked child does: apply every layer, then run the program (stdin or call mode)
  worker       the worker process: start-up, temp dirs, the W/M/C process structure (``main``)
  probe        the worker's start-up probe: which layers work here, interpreter dirs the sandbox uid may read
  forkserver   W: forks every child ahead of its job, reaps it (never reads a job)
  jobs         M: reads each job, runs it in a child, enforces the per-test limits from outside
  records      the child's result records (binary payloads) and their decoding in M
  cpu_clock    a child's CPU time read from outside (/proc), the per-test CPU budget
  mounts       private mount namespace, per-child tmpfs with size and inode limits, read-only binds
  tree         iterative, never-raising removal of a directory tree (any modes, no symlink following)
  protocol     message framing shared by the worker and the supervisor
"""
