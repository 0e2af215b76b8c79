package diverged

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/engine/coord"
)

// TestCopiedUpTo: an interrupted quarantine copy resumes after the
// batches the diverged partition already holds, recognized by CRC.
func TestCopiedUpTo(t *testing.T) {
	e, err := engine.Open(engine.Config{Dir: "/data", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	src, err := e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	dst, err := e.Create("t.diverged", engine.TopicID{2}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var stored [][]byte
	for i := range 5 {
		raw := coord.EncodeBatch(time.Now(), []coord.Record{{Value: []byte{byte(i)}}, {Value: []byte{byte(i), 1}}})
		if _, err := src.Append(ctx, &engine.AppendRequest{Topic: "t", TopicID: engine.TopicID{1}, Records: raw, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eachBatch(src, 0, func(bs [][]byte) error { stored = append(stored, bs...); return nil }); err != nil || len(stored) != 5 {
		t.Fatalf("read back %d batches: %v", len(stored), err)
	}
	// Two batches copied before the crash (from offset 2: batches 1 and 2).
	for _, b := range stored[1:3] {
		if _, err := dst.Append(ctx, &engine.AppendRequest{Topic: "t.diverged", TopicID: engine.TopicID{2}, Origin: engine.OriginMirrorControl, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if next, err := copiedUpTo(dst, 0, src, 2); err != nil || next != 6 {
		t.Fatalf("copiedUpTo = %d, %v; want 6 (after the second copied batch)", next, err)
	}
	if next, err := copiedUpTo(dst, 4, src, 2); err != nil || next != 2 {
		t.Fatalf("copiedUpTo from the end of the copies = %d, %v; want 2 (nothing copied yet)", next, err)
	}
}
