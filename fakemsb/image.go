//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// imageConfig is the part of an OCI image's config that msb applies to
// every command run in the sandbox: the user, the environment and the
// working directory.
type imageConfig struct {
	User    string   `json:"user"`
	Env     []string `json:"env"`
	Workdir string   `json:"workdir"`
}

// guestImageConfig is the config of oma-sandbox's guest image
// (image/Dockerfile, scripts/build-image.sh): fakemsb gives it to every image unless
// FAKEMSB_IMAGE_CONFIG says otherwise, so commands run as msb would run
// them there.
var guestImageConfig = imageConfig{
	User:    "65534:65534",
	Env:     []string{"PATH=" + guestPATH, "HOME=/workspace", "TMPDIR=/workspace", "PYTHONDONTWRITEBYTECODE=1"},
	Workdir: "/workspace",
}

// loadImageConfig reads FAKEMSB_IMAGE_CONFIG, a JSON imageConfig that
// every image gets; unset, guestImageConfig. "{}" plays an image without
// a config: root, no environment, /.
func loadImageConfig() (imageConfig, error) {
	v, ok := os.LookupEnv("FAKEMSB_IMAGE_CONFIG")
	if !ok {
		return guestImageConfig, nil
	}
	var c imageConfig
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("not a JSON object of user, env and workdir: %v", err)
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return c, fmt.Errorf("env entry %q is not KEY=VALUE", e)
		}
	}
	if c.Workdir != "" && !strings.HasPrefix(c.Workdir, "/") {
		return c, fmt.Errorf("workdir %q is not absolute", c.Workdir)
	}
	return c, nil
}
