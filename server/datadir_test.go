package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/internal/properties"
)

// startOn starts a broker with node ID node on dir and returns it, or the
// error of New or Start.
func startOn(t *testing.T, dir string, node int32) (*Broker, error) {
	t.Helper()
	b, err := New(Config{NodeID: node, DataDir: dir, Listen: "127.0.0.1:0", Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	t.Cleanup(func() { b.Close() })
	return b, nil
}

// TestDataDirMeta: the first start writes Kafka's meta.properties with the
// node and cluster IDs, and a restart as the same node reads it back.
func TestDataDirMeta(t *testing.T) {
	dir := t.TempDir()
	b, err := startOn(t, dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	cluster := b.Metadata().Image().ClusterID
	b.Close()
	f, err := os.Open(filepath.Join(dir, "meta.properties"))
	if err != nil {
		t.Fatal(err)
	}
	props, err := properties.Read(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if props["version"] != "1" || props["node.id"] != "3" || props["cluster.id"] != cluster || cluster == "" {
		t.Fatalf("meta.properties %v, want version 1, node.id 3, cluster.id %q", props, cluster)
	}
	b, err = startOn(t, dir, 3)
	if err != nil {
		t.Fatalf("restart as the same node: %v", err)
	}
	if got := b.Metadata().Image().ClusterID; got != cluster {
		t.Fatalf("cluster %q after restart, want %q", got, cluster)
	}
}

// TestDataDirOtherNode: a data dir reused with another node ID is refused
// at once, naming both IDs (raft used to wait forever for a configuration
// it was not part of).
func TestDataDirOtherNode(t *testing.T) {
	dir := t.TempDir()
	b, err := startOn(t, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	_, err = startOn(t, dir, 2)
	if err == nil || !strings.Contains(err.Error(), "belongs to node 1, not to node 2") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("node 2 on node 1's data dir: %v", err)
	}
}

// TestDataDirOtherCluster: a data dir whose metadata was replaced (here
// deleted, so that a new cluster is made) is refused, naming both
// cluster IDs.
func TestDataDirOtherCluster(t *testing.T) {
	dir := t.TempDir()
	b, err := startOn(t, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	first := b.Metadata().Image().ClusterID
	b.Close()
	for _, sub := range []string{"data", "meta"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = startOn(t, dir, 1)
	if err == nil || !strings.Contains(err.Error(), "belongs to cluster "+first+", but its metadata is cluster ") {
		t.Fatalf("start on a data dir with new metadata: %v", err)
	}
}

// TestDataDirInUse: a second broker on a data dir in use is refused with a
// message naming the process that holds it; once that broker closes, the
// dir can be used again.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := startOn(t, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = startOn(t, dir, 1)
	want := fmt.Sprintf("data dir %s is in use by another Tandem (pid %d)", dir, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second broker on the same dir: %v, want %q", err, want)
	}
	first.Close()
	if _, err := startOn(t, dir, 1); err != nil {
		t.Fatalf("after the first broker closed: %v", err)
	}
}
