package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A session keeps what its probes proved, so that a process attaching to
// it (the CLI runs one per tool call) runs no probe sandbox: a proof holds
// while the host facts it names are unchanged (the kernel's boot, the
// user, the sandbox tools and this program, the namespace and ptrace
// sysctls, the cgroup layout, the limits asked for) and for at most
// proofMaxAge after it was made, which bounds a change the facts miss.
// Each set of facts has a file of its own, named by their digest, so that
// programs attaching in turn (the CLI and a program using the library, two
// versions of the CLI) each find theirs; a session keeps at most
// proofsKept. doctor (Probe) never reads one.
const (
	proofPrefix   = "probe-"
	proofSuffix   = ".json"
	proofMaxAge   = time.Hour
	proofMaxBytes = 64 << 10
	proofsKept    = 4
)

// proofPath is where a session keeps the proof for facts.
func proofPath(root string, facts []byte) string {
	sum := sha256.Sum256(facts)
	return filepath.Join(root, proofPrefix+hex.EncodeToString(sum[:8])+proofSuffix)
}

type proof struct {
	Facts json.RawMessage `json:"facts"`
	At    time.Time       `json:"at"`
	Caps  Capabilities    `json:"caps"`
}

// probed is a probe's outcome and the host facts it held for (nil where
// this platform keeps no proofs).
type probed struct {
	caps     Capabilities
	plat     platform
	facts    []byte
	recalled bool // from a kept proof, which keeps its age
}

// probeFor returns what a probe of req proves: from the proof kept in a
// session's root when it still holds, else by probing.
func probeFor(ctx context.Context, req probeRequest, root string) probed {
	plat, facts := knownPlatform(req)
	if plat != nil && root != "" {
		if caps, ok := recallProof(root, facts, time.Now()); ok {
			return probed{caps: caps, plat: plat, facts: facts, recalled: true}
		}
	}
	caps, plat := probeHost(ctx, req)
	return probed{caps: caps, plat: plat, facts: facts}
}

// keep records the proof in a session's root; a probe that found no
// working sandbox proves nothing worth keeping.
func (p probed) keep(root string) error {
	if p.recalled || p.facts == nil || p.plat == nil || p.caps.Backend == "" {
		return nil
	}
	data, err := json.Marshal(proof{Facts: p.facts, At: time.Now().UTC(), Caps: p.caps})
	if err != nil {
		return err
	}
	path := proofPath(root, p.facts)
	tmp, err := os.CreateTemp(root, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	pruneProofs(root, path, time.Now())
	return nil
}

// pruneProofs removes the proofs in root but kept that are older than
// proofMaxAge, then the oldest of the rest beyond proofsKept. A proof lost
// to a race with another process's keep costs a probe, nothing more.
func pruneProofs(root, kept string, now time.Time) {
	// Listed, not globbed: root's own name may hold glob metacharacters.
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type aged struct {
		path string
		at   time.Time
	}
	var others []aged
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), proofPrefix) || !strings.HasSuffix(e.Name(), proofSuffix) {
			continue
		}
		path := filepath.Join(root, e.Name())
		fi, err := os.Lstat(path)
		if path == kept || err != nil {
			continue
		}
		if now.Sub(fi.ModTime()) > proofMaxAge {
			_ = os.Remove(path)
			continue
		}
		others = append(others, aged{path, fi.ModTime()})
	}
	slices.SortFunc(others, func(a, b aged) int { return b.at.Compare(a.at) })
	for _, old := range others[min(len(others), proofsKept-1):] {
		_ = os.Remove(old.path)
	}
}

// recallProof returns the capabilities the session's proof for these facts
// holds when it names them and is recent. Anything else about the file (not
// there, a symlink, another owner's, writable by others, oversized,
// malformed) is no proof.
func recallProof(root string, facts []byte, now time.Time) (Capabilities, bool) {
	f, err := openOwned(proofPath(root, facts))
	if err != nil {
		return Capabilities{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, proofMaxBytes+1))
	if err != nil || len(data) > proofMaxBytes {
		return Capabilities{}, false
	}
	var pr proof
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if dec.Decode(&pr) != nil || pr.Caps.Backend == "" {
		return Capabilities{}, false
	}
	age := now.Sub(pr.At)
	if !bytes.Equal(pr.Facts, facts) || age < -time.Minute || age > proofMaxAge {
		return Capabilities{}, false
	}
	return pr.Caps, true
}

// errNotOwned is a file that is not this user's own regular file.
var errNotOwned = errors.New("not a regular file of this user's, writable by no one else")
