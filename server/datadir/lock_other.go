//go:build !unix

package datadir

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir opens dir/.lock without locking it: where flock does not
// exist, Pebble's own lock on the engine's directory refuses a second
// broker, with its own message.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	return f, nil
}
