"""Process sandbox for model-generated Python: pre-started workers that fork one sandboxed child per sample.

Processes: supervisor (the host: verl RewardLoopWorker, Ray actor, OpenRLHF) -> worker W (``Popen`` of a
fresh interpreter, own session, scrubbed env; never reads a job) -> job process J (forked from W per job,
ahead of it) -> one sandboxed child per job (forked by J before J reads its job, so it holds no job data in
memory), which runs every test of the job; a fresh child only after a crash or an unusable state.

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
  worker       the worker process: start-up probe, W/J process structure, per-test monitoring
  protocol     message framing shared by the worker and the supervisor
"""
