"""Process sandbox for model-generated Python: pre-started workers that fork one child per run.

Modules (all stdlib-only, they also run inside the worker process):
  seccomp_bpf  hand-written seccomp-BPF filter (deny fork/exec/sockets/ptrace/kill-others/namespaces)
  landlock     filesystem (read allowlist, write only the private tmp dir), TCP and signal scoping
  limits       rlimits, uid drop, no-new-privs, parent-death signal
  child        what a forked child does: apply every layer, then run the program (stdin or call mode)
  worker       the worker process main loop (JSON lines over pipes)
  protocol     message framing shared by the worker and the supervisor
"""
