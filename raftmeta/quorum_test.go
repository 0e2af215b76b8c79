package raftmeta

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"
)

func openTCP(t *testing.T, id int32, join bool) *Controller {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Open(ctx, Config{
		NodeID: id, Dir: t.TempDir(), DB: db, RaftAddr: "127.0.0.1:0", Join: join,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		db.Close()
	})
	return c
}

// waitImage waits until cond holds for c's image.
func waitImage(t *testing.T, c *Controller, what string, cond func(*Image) bool) *Image {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		ch := c.Changed()
		if img := c.Image(); cond(img) {
			return img
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; image %+v", what, c.Image())
		}
	}
}

// TestTCPQuorum runs a TCP voter, lets a second node join it, and checks
// that the follower builds the same image and refuses decisions.
func TestTCPQuorum(t *testing.T) {
	leader := openTCP(t, 1, false)
	registerBrokers(t, leader, 1, 2)
	mustCreate(t, leader, TopicSpec{Name: "before", Partitions: 2, ReplicationFactor: 2})

	follower := openTCP(t, 2, true)
	if err := leader.AddVoter(ctxT(t), 2, follower.RaftAddr()); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, leader, TopicSpec{Name: "after", Partitions: 1, ReplicationFactor: 1})
	want := leader.Image()
	got := waitImage(t, follower, "replicated image", func(img *Image) bool { return img.Index >= want.Index && img.ControllerID == 1 })
	if got.ClusterID != want.ClusterID || len(got.Topics) != 2 || got.Topics["before"].ID != want.Topics["before"].ID ||
		len(got.TopicsByID) != 2 || len(got.Brokers) != 2 {
		t.Fatalf("follower image %+v, leader %+v", got, want)
	}
	wantCode(t, follower.CreateTopics(ctxT(t), []TopicSpec{{Name: "x", Partitions: 1, ReplicationFactor: 1}}, false)[0], kerr.NotController)
	_, err := follower.AllocateProducerIDs(ctxT(t), 1)
	wantCode(t, err, kerr.NotController)
}
