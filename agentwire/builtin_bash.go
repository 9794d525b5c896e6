package agentwire

// The bash tool's builtins (package bashproto holds their scripts).
const (
	// BuiltinBashSupervisor does bashproto.Script's supervisor.
	BuiltinBashSupervisor = "bash-supervisor"
	// BuiltinBashKill does bashproto.KillScript, and also reaches the
	// agent's own supervisors of the call.
	BuiltinBashKill = "bash-kill"
)
