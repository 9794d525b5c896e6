package mcpserver

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// ErrBadToken is returned for a bearer token that is too short or holds
// characters an Authorization header cannot carry.
var ErrBadToken = errors.New("the MCP bearer token must be at least 32 characters of A-Z a-z 0-9 - . _ ~ + /")

// tokenPattern is RFC 6750's b64token, at least 32 characters long.
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9\-._~+/]{32,}=*$`)

// NewToken returns a fresh bearer token: 32 bytes from crypto/rand.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails: it crashes the program instead
	return base64.RawURLEncoding.EncodeToString(b)
}

// CheckToken refuses a token ServeHTTP would not accept.
func CheckToken(token string) error {
	if !tokenPattern.MatchString(token) {
		return ErrBadToken
	}
	return nil
}

// guard admits a request only when it is addressed to this server (Host),
// comes from no other web origin (Origin), and carries the bearer token.
// The first two stop a web page in the user's browser, by DNS rebinding or
// a cross-origin request; the token stops every other local user and
// process. Only then is the body read, at most MaxMessageBytes of it.
type guard struct {
	next      http.Handler
	hosts     map[string]bool // host:port forms that name this server
	origins   map[string]bool
	tokenHash [sha256.Size]byte
	maxBody   int64
}

func newGuard(next http.Handler, addr *net.TCPAddr, token string, maxBody int64) *guard {
	port := strconv.Itoa(addr.Port)
	names := []string{"localhost", addr.IP.String()}
	if addr.IP.To4() == nil {
		names[1] = "[" + addr.IP.String() + "]"
	}
	g := &guard{next: next, hosts: map[string]bool{}, origins: map[string]bool{}, tokenHash: sha256.Sum256([]byte(token)), maxBody: maxBody}
	for _, name := range names {
		g.hosts[name+":"+port] = true
		g.origins["http://"+name+":"+port] = true
		if addr.Port == 80 {
			// HTTP's default port, which clients leave out.
			g.hosts[name] = true
			g.origins["http://"+name] = true
		}
	}
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hosts[r.Host] {
		http.Error(w, fmt.Sprintf("Forbidden: Host %q is not this server", r.Host), http.StatusForbidden)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !g.origins[origin] {
		http.Error(w, fmt.Sprintf("Forbidden: Origin %q is not this server", origin), http.StatusForbidden)
		return
	}
	if !g.authorized(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="oma-sandbox"`)
		http.Error(w, "Unauthorized: send the server's token as \"Authorization: Bearer TOKEN\"", http.StatusUnauthorized)
		return
	}
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > g.maxBody {
			g.refuse(w, r.Body, body)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	g.next.ServeHTTP(w, r)
}

// authorized compares the header's token with the server's in constant
// time; hashing both first also hides the token's length.
func (g *guard) authorized(header string) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], g.tokenHash[:]) == 1
}

// maxRefusedBody bounds how much of an oversized body is read to find its
// id; past it the request is refused without one.
const maxRefusedBody = 1 << 30

// refuse answers an oversized POST as the stdio transport does: a
// tools/call with a tool error result, another request with a JSON-RPC
// error, both with HTTP 200 so the client reads them as the call's answer.
func (g *guard) refuse(w http.ResponseWriter, rest io.Reader, head []byte) {
	scan := &envelopeScanner{limit: g.maxBody}
	_, _ = scan.Write(head)
	var a *answer
	if n, _ := io.CopyN(scan, rest, maxRefusedBody); n < maxRefusedBody {
		a = scan.refusal()
	} else {
		w.Header().Set("Connection", "close") // the rest of the body is unread
	}
	if a == nil {
		http.Error(w, tooLargeText(scan.n, g.maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	data, err := json.Marshal(a)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}
