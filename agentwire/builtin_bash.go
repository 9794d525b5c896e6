package agentwire

// The bash tool's builtins (package bashproto builds their arguments).
const (
	// BuiltinBashSupervisor runs a bash command under an in-guest timer
	// with its output in a log relayed between two sentinel lines, and
	// kills its whole process tree on a timeout or on request: args
	// bashproto.Args, stdin the call's secret and the command.
	BuiltinBashSupervisor = "bash-supervisor"
	// BuiltinBashKill asks the supervisor of a call to kill what its
	// command left running and waits for it, or kills what carries the
	// call's tag: args bashproto.KillArgs.
	BuiltinBashKill = "bash-kill"
	// BuiltinStandbyEnd ends the bashes the agent started ahead for calls
	// to come (bashproto.Call.Next), which are the guest's processes as
	// much as the commands they would run: asked before the host judges
	// whether anything runs in the sandbox. No args.
	BuiltinStandbyEnd = "standby-end"
)
