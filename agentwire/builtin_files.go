package agentwire

// Names of the builtins that do the file tools' guest scripts (tools/write.go
// writeScript, tools/edit.go catScript, tools/read.go readScript, tools/ls.go
// lsScript), for the tools that ask for them and the agent that offers them.
const (
	BuiltinWrite = "write" // writeScript: args path, original length, workspace, shown name
	BuiltinCat   = "cat"   // catScript: args path, workspace, shown name
	BuiltinRead  = "read"  // readScript: args path, first line, lines, bytes, shown name, end mark
	BuiltinLs    = "ls"    // lsScript: args directory, shown name
)
