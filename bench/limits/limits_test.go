package limits

import (
	"bytes"
	"testing"
	"time"
)

// TestMirrorPipe: the mirror pipe limit carries bytes and names a rate.
func TestMirrorPipe(t *testing.T) {
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	rate, err := MirrorPipe(t.TempDir(), chunk, 200*time.Millisecond)
	if err != nil || rate <= 0 {
		t.Fatalf("mirror pipe: %v MB/s, %v", rate/1e6, err)
	}
}
