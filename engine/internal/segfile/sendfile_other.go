//go:build !linux

package segfile

import (
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SendFile is sendfile(2) on Linux; elsewhere records are copied.
func SendFile(io.Writer, vfs.File, int64, int64) (int64, bool, error) { return 0, false, nil }
