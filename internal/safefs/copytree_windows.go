package safefs

import (
	"context"
	"errors"
)

// CopyTree is not available on Windows, where no backend copies a guest's tree.
func CopyTree(ctx context.Context, src, dst string, maxBytes int64) ([]string, error) {
	return nil, errors.New("copying a sandbox's tree is not supported on windows")
}
