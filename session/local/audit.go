package local

import (
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// AuditKind names an audit event.
type AuditKind string

const (
	AuditStarted   AuditKind = "execution-started"
	AuditCompleted AuditKind = "execution-completed"
)

// AuditEvent records one command of a danger-full-access session, where
// nothing else stands between the command and the host.
type AuditEvent struct {
	Kind    AuditKind
	Session string
	Mode    Mode
	Time    time.Time
	// ExitCode is set on completion; -1 when the command did not finish.
	ExitCode int
}

// emit delivers an audit event in danger-full-access mode, best effort:
// it is also logged, and a panicking sink changes nothing.
func (s *Session) emit(kind AuditKind, res *session.Result) {
	if s.rec.Policy.Mode != ModeDangerFullAccess {
		return
	}
	ev := AuditEvent{Kind: kind, Session: s.rec.Name, Mode: s.rec.Policy.Mode, Time: time.Now().UTC(), ExitCode: -1}
	if res != nil {
		ev.ExitCode = res.ExitCode
	}
	s.log.Info("local sandbox audit", "kind", string(kind), "exit_code", ev.ExitCode)
	if s.audit == nil {
		return
	}
	defer func() { _ = recover() }()
	s.audit(ev)
}
