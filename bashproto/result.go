package bashproto

import "fmt"

// FormatResult is the bash tool's result text: the combined output, then on
// a timeout "Command timed out after N seconds", else on a non-zero exit
// "Command exited with code N", separated from the output by a blank line.
// Empty output reads "(no output)", except before a timeout note, which then
// stands alone.
func FormatResult(output []byte, exitCode int, timedOut bool, timeoutSecs int64) string {
	text := string(output)
	if timedOut {
		return withNote(text, fmt.Sprintf("Command timed out after %d seconds", timeoutSecs))
	}
	if text == "" {
		text = "(no output)"
	}
	if exitCode != 0 {
		return withNote(text, fmt.Sprintf("Command exited with code %d", exitCode))
	}
	return text
}

func withNote(text, note string) string {
	if text == "" {
		return note
	}
	return text + "\n\n" + note
}
