package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A session keeps what its last probe proved, so that a process attaching
// to it (the CLI runs one per tool call) runs no probe sandbox: the proof
// holds while the host facts it names are unchanged (the kernel's boot,
// the user, the sandbox tools and this program, the namespace and ptrace
// sysctls, the cgroup layout, the limits asked for) and for at most
// proofMaxAge after it was made, which bounds a change the facts miss.
// doctor (Probe) never reads one.
const (
	proofFile     = "probe.json"
	proofMaxAge   = time.Hour
	proofMaxBytes = 64 << 10
)

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
	tmp, err := os.CreateTemp(root, proofFile+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(root, proofFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// recallProof returns the capabilities a session's proof holds when its
// facts are these and it is recent. Anything else about the file (not
// there, a symlink, another owner's, writable by others, oversized,
// malformed) is no proof.
func recallProof(root string, facts []byte, now time.Time) (Capabilities, bool) {
	f, err := openOwned(filepath.Join(root, proofFile))
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
