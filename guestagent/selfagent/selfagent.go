// Package selfagent lets a program serve as its own guest agent: linked
// in, it runs the agent (guestagent.Main) instead of the program when a
// sandbox starts the program as the agent, so a build without the
// bundled agent (guestagent/bundle) still runs every call's builtin. The
// local backend on Linux always can; a guest of msb can when the program
// is a static Linux binary of the guest's architecture (Guest).
package selfagent

// GuestPath is where a sandbox sees the guest agent, on msb and local alike.
const GuestPath = "/.oma-sandbox/agent"

// StagedPrefix begins the path a host copies a newer agent to in a running
// sandbox, beside GuestPath, which that agent then installs itself at
// (`install STAGED GuestPath`).
const StagedPrefix = GuestPath + ".new-"
