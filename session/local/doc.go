// Package local is the session backend for hosts without KVM: an OS
// sandbox instead of a microVM, behind the same session.Session seam, so
// the agent tools, uploads and outputs behave as on msb.
//
// # Backends
//
// Linux runs a session's calls under bubblewrap in fresh mount, pid, ipc,
// uts and (under network deny) network namespaces: as frames to the guest
// agent in the session's resident sandbox, which lives from the first
// call to Close or Poison, whichever process started it (resident.go),
// or, for root's calls, under SandboxPerCall and where the resident
// sandbox cannot start, in a sandbox of the call's own. The root is a
// tmpfs holding /usr, /etc and the runtime directories read-only, a private
// /tmp, and the session's host directories at the msb image's guest
// paths: /workspace, /mnt/session/uploads (read-only to commands),
// /mnt/session/outputs and /workspace/skills. Commands run as uid 65534
// without capabilities: when this process is root, bwrap builds the
// namespaces and setpriv drops the command to host uid 65534 with
// no_new_privs, so it owns nothing of the host's; otherwise bwrap maps the
// caller to uid 65534 in a user namespace. ShellOptions.User "0" is root
// inside the sandbox for preparing uploads and skills: host root with only
// CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER, the session directories
// writable, the rest read-only, no network, whatever the policy.
//
// Every command runs under a seccomp filter (internal/confine): no new
// user namespaces, no AF_VSOCK, no mount, keyring, bpf, io_uring or module
// calls. Outside danger-full-access, a Landlock scope keeps the host's
// abstract unix sockets out of reach, which matters when the sandbox
// shares the host's network.
//
// The backend runs on Linux only: every tool call is a builtin of the
// guest agent, which needs Linux. On other systems every session is
// refused and doctor says why (macOS has msb's microVMs; Windows, WSL2).
//
// A command's background processes outlive its call in the resident
// sandbox, as in a VM, until the sandbox ends; a sandbox of one call's
// own takes them with its pid namespace when the call returns.
//
// # Policy and evidence
//
// A Policy has a Mode (read-only, workspace-write, danger-full-access,
// the last only with AllowDangerous) and a Network (deny, the default, or
// unrestricted, or, on Linux, an allowlist (Policy.Allow, with optional
// Policy.Secrets substituted in plain HTTP headers) enforced by an
// egress.Proxy outside the sandbox (one per resident sandbox, or per call
// in a sandbox of its own), reached through a unix socket bound into the
// sandbox and an in-sandbox relay; elsewhere refused rather than
// widened). Create first probes the host by running real sandboxes (Probe
// gives the same report for a doctor command): each control (filesystem,
// network, process, resources and each limit) gets none, partial or full
// evidence with the reason. The session keeps what they proved, and Attach
// probes again only when the host facts it was proved on changed, or an
// hour has passed (proof.go). A session whose policy needs more than the
// host proved is refused with an *UnavailableError before anything runs;
// a missing or no-op bwrap is caught by what a probe command sees from
// inside.
//
// # Limits
//
// Wall time (a guest timeout), output bytes and file size apply to each
// call. Memory and CPU bound the resident sandbox as a whole, as a VM's
// bound the VM, and its process count every process its calls start,
// together; a sandbox of one call's own has them to itself. They use
// cgroups created under this process's own groups and entered before the
// sandbox executes: on cgroup v2 at clone
// (CLONE_INTO_CGROUP), on a cgroup v1 or hybrid host by a /bin/sh shim
// that writes its own pid into each group and only then execs bwrap. File
// size is RLIMIT_FSIZE set by prlimit before bwrap. A call whose limits
// cannot be set up is refused, never run unlimited. Limits that fire are
// reported as "oma-sandbox: ..." lines appended to the call's stderr.
// ParseLimits reads the CLI's `--limit KEY=VALUE` specs; ParseMode and
// ParseNetwork read the mode and network names.
//
// # State
//
// Each session has a directory under the state directory (Options.StateDir,
// by default DefaultStateDir): its record, its cgroup list and its box of
// workspace, uploads and outputs. Attach opens it by name from any
// process, Close removes it (Poison never does), List and Reap find and
// remove stale ones. Commands never see the record. Removal first kills
// the session's sandboxes, whichever process started them, then removes
// the box the guest wrote with internal/safefs (directory descriptors, no
// symlink followed, any depth), and the record last: a removal that fails
// leaves the session listed for a later Close or Reap.
//
// # Deadlines
//
// Every Shell call ends: at its GuestTimeout, or, when it names none (as
// glob, grep and output collection do), at the session's operation
// timeout (Options.OperationTimeout, 10 s by default), as on msb.
//
// Beside the seam, a Session offers line-framed stdio conversations
// (OpenStdio), file snapshots with restore of its own content (Snapshot,
// Restore), and audit events in danger-full-access mode.
package local
