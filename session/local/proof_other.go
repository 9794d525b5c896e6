//go:build !linux

package local

import "os"

// knownPlatform: only Linux keeps proofs; elsewhere every session probes.
func knownPlatform(probeRequest) (platform, []byte) { return nil, nil }

func openOwned(string) (*os.File, error) { return nil, errNotOwned }

// privateStateDir: only Linux runs sessions; nothing is written elsewhere.
func privateStateDir(string) error { return nil }
