package bashproto

import (
	"bytes"
	"fmt"
)

// Tail keeps the end of a command's output as it streams, enough to show
// the last lines within a byte budget, and counts what it does not keep.
// Memory stays below twice the budget however long the output is.
type Tail struct {
	max      int
	buf      []byte
	total    int64 // bytes seen
	newlines int64
	lastLine int64 // bytes after the last newline
}

// NewTail returns a Tail that can show up to maxBytes.
func NewTail(maxBytes int) *Tail {
	return &Tail{max: maxBytes}
}

// Write records p; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if i := bytes.LastIndexByte(p, '\n'); i >= 0 {
		t.newlines += int64(bytes.Count(p, []byte{'\n'}))
		t.lastLine = int64(len(p) - i - 1)
	} else {
		t.lastLine += int64(len(p))
	}
	keep := t.max + 1 // one more byte tells whether the kept text starts a line
	if len(p) >= keep {
		t.buf = append(t.buf[:0], p[len(p)-keep:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*keep {
		t.buf = t.buf[:copy(t.buf, t.buf[len(t.buf)-keep:])]
	}
	return len(p), nil
}

// Shown is the part of the output a result shows.
type Shown struct {
	Text       []byte
	Truncated  bool
	ByBytes    bool  // cut by the byte budget rather than the line count
	Partial    bool  // only the end of the last line fits
	FirstLine  int64 // 1-based numbers of the lines shown
	LastLine   int64
	TotalLines int64 // newlines + 1, as splitting on "\n" counts them
	LineBytes  int64 // the last line's size, when Partial
}

// Show returns the last whole lines that fit in maxLines lines and the
// byte budget, joined by newlines as in the output; when not even the
// last line fits, the end of it, cut at a UTF-8 boundary.
func (t *Tail) Show(maxLines int) Shown {
	total := t.newlines + 1
	kept := t.buf
	if t.total > int64(len(kept)) {
		// The kept text starts inside a line that cannot fit whole.
		if i := bytes.IndexByte(kept, '\n'); i >= 0 {
			kept = kept[i+1:]
		} else {
			return t.partial(total)
		}
	}
	if total <= int64(maxLines) && t.total <= int64(t.max) {
		return Shown{Text: kept, FirstLine: 1, LastLine: total, TotalLines: total}
	}
	// Take whole lines from the end while they fit.
	parts := bytes.Split(kept, []byte{'\n'})
	lines, size, byBytes := 0, 0, t.total > int64(len(kept))
	for i := len(parts) - 1; i >= 0 && lines < maxLines; i-- {
		add := len(parts[i])
		if lines > 0 {
			add++ // the newline between it and the next
		}
		if size+add > t.max {
			byBytes = true
			break
		}
		size += add
		lines++
	}
	if lines == 0 {
		return t.partial(total)
	}
	if lines == maxLines {
		byBytes = false
	}
	return Shown{Text: kept[len(kept)-size:], Truncated: true, ByBytes: byBytes,
		FirstLine: total - int64(lines) + 1, LastLine: total, TotalLines: total}
}

func (t *Tail) partial(total int64) Shown {
	text := t.buf[max(len(t.buf)-t.max, 0):]
	for len(text) > 0 && text[0]&0xC0 == 0x80 {
		text = text[1:]
	}
	return Shown{Text: text, Truncated: true, ByBytes: true, Partial: true, FirstLine: total, LastLine: total, TotalLines: total, LineBytes: t.lastLine}
}

// Note is the bracketed line that follows truncated output, naming the
// file with all of it; "" when nothing was cut.
func (s Shown) Note(maxBytes int, logPath string) string {
	switch {
	case !s.Truncated:
		return ""
	case s.Partial:
		return fmt.Sprintf("[Showing last %s of line %d (line is %s). Full output: %s]", FormatSize(int64(len(s.Text))), s.LastLine, FormatSize(s.LineBytes), logPath)
	case s.ByBytes:
		return fmt.Sprintf("[Showing lines %d-%d of %d (%s limit). Full output: %s]", s.FirstLine, s.LastLine, s.TotalLines, FormatSize(int64(maxBytes)), logPath)
	}
	return fmt.Sprintf("[Showing lines %d-%d of %d. Full output: %s]", s.FirstLine, s.LastLine, s.TotalLines, logPath)
}

// FormatSize renders a byte count the way agent tool results do (50.0KB).
func FormatSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
}

// FormatResult is the bash tool's result text: the output shown, then the
// truncation note if any, then the notes (limits of the session that
// fired), then on a timeout "Command timed out after N seconds", else on a
// non-zero exit "Command exited with code N", each separated by a blank
// line. Empty output reads "(no output)", except before a timeout note,
// which then stands alone.
func FormatResult(output []byte, notes []string, exitCode int, timedOut bool, timeoutSecs int64) string {
	text := string(output)
	for _, n := range notes {
		text = withNote(text, n)
	}
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
