package agentwire

// Names of the file tools' builtins (tools/write.go, tools/edit.go,
// tools/read.go, tools/ls.go say what each does), for the tools that ask
// for them and the agent that offers them.
const (
	BuiltinWrite = "write" // args path, original length, workspace, shown name; stdin the original, then the content
	BuiltinCat   = "cat"   // args path, workspace, shown name
	BuiltinRead  = "read"  // args path, first line, lines, bytes, shown name, end mark
	BuiltinLs    = "ls"    // args directory, shown name
)
