package agentwire

// The transfer builtins: the guest side of collecting outputs and placing
// uploads and skills (package transfer), each given the arguments the
// function beside it builds.
const (
	BuiltinOutputsList  = "outputs-list"  // outputs.ListingArgs; stdout the listing outputs.ParseListing reads
	BuiltinOutputsFetch = "outputs-fetch" // args the outputs root; stdin NUL-ended paths; stdout a tar of them
	BuiltinExtract      = "extract"       // args uploads or skills, the root; stdin the tar to extract below it
)

// BuiltinPrepare readies a new msb sandbox: args the uploads root, the
// outputs root, the workspace (their owners and modes, then the ripgrep
// preflight in the workspace).
const BuiltinPrepare = "prepare"
