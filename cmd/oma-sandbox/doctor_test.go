package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
)

// TestDoctorRealMsb runs doctor against the real msb: its version, msb
// doctor's own verdict and reason, and an image missing from a fresh
// MSB_HOME. The verdict is whatever `msb doctor` says on this host.
func TestDoctorRealMsb(t *testing.T) {
	env := realmsb.New(t)
	t.Setenv("MSB_HOME", env.Home)
	var msbDoctor bytes.Buffer
	cmd := exec.Command(env.Bin, "doctor")
	cmd.Env = append(cmd.Environ(), "NO_COLOR=1")
	cmd.Stderr = &msbDoctor
	doctorErr := cmd.Run()

	var stdout, stderr bytes.Buffer
	Main([]string{"doctor", "--json", "--msb", env.Bin}, nil, &stdout, &stderr)
	var rep doctorReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Equal(t, backendMsb, rep.Backends[0].Name)
	checks := map[string]omasandbox.Check{}
	for _, ch := range rep.Backends[0].Checks {
		checks[ch.Name] = ch
	}
	assert.Equal(t, omasandbox.Check{Name: "msb version", Status: "ok", Detail: realmsb.Version + ", within the tested range 0.6.7 to 0.6.18"}, checks["msb version"])
	if doctorErr == nil {
		assert.Equal(t, "ok", checks["msb doctor"].Status)
	} else {
		_, reason, ok := strings.Cut(msbDoctor.String(), "error: ")
		require.True(t, ok, "msb doctor failed without an error line: %s", msbDoctor.String())
		reason, _, _ = strings.Cut(reason, "\n")
		assert.Equal(t, "fail", checks["msb doctor"].Status)
		assert.Contains(t, checks["msb doctor"].Detail, "failed: "+reason)
		assert.NotEqual(t, backendMsb, rep.Auto, "auto never picks an msb whose doctor fails")
	}
	assert.Equal(t, "fail", checks["image"].Status)
	assert.Contains(t, checks["image"].Detail, "is not cached")
	assert.False(t, rep.Backends[0].Usable)
}
