// Package datadir is what a broker's data dir holds beside the engine's
// and the quorum's data: whose it is (meta.properties) and who uses it
// now (.lock).
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tandem-kafka/tandem/internal/properties"
)

// A broker's data dir holds, beside the engine's data/ and the metadata
// quorum's meta/:
//
//   - meta.properties, in Kafka's format (version=1, node.id, cluster.id):
//     whose data this is. A broker started on another node's or another
//     cluster's data dir refuses at once, where raft would wait forever
//     for a configuration it is not part of.
//   - .lock, locked while a broker uses the dir and holding its pid, so
//     that a second broker on the same dir is refused with a message that
//     names the first.
const (
	metaPropsFile = "meta.properties"
	lockFile      = ".lock"
)

// Meta is what meta.properties says; an empty ClusterID is not
// known yet (the quorum writes it once it first leads).
type Meta struct {
	NodeID    int32
	ClusterID string
}

// Open creates and locks dir and checks that it belongs to node.
// It writes meta.properties at once for a new dir, so that even a first
// start cut short records the node. The caller closes the returned lock.
func Open(dir string, node int32) (lock *os.File, meta Meta, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, meta, fmt.Errorf("creating data dir: %w", err)
	}
	if lock, err = lockDir(dir); err != nil {
		return nil, meta, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	meta, found, err := readMeta(dir)
	if err != nil {
		return nil, meta, err
	}
	switch {
	case found && meta.NodeID != node:
		return nil, meta, fmt.Errorf("data dir %s belongs to node %d, not to node %d (%s: node.id=%d)",
			dir, meta.NodeID, node, metaPropsFile, meta.NodeID)
	case !found && isNew(dir):
		meta = Meta{NodeID: node}
		if err := writeMeta(dir, meta); err != nil {
			return nil, meta, err
		}
	}
	return lock, meta, nil
}

// isNew reports whether dir holds no engine or quorum data yet. A
// dir with data and no meta.properties was made before Tandem wrote one;
// it gets one after its first successful start.
func isNew(dir string) bool {
	for _, sub := range []string{"data", "meta"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// CheckClusterID compares the cluster the quorum belongs to with the one
// meta.properties names, and records it there the first time.
func CheckClusterID(dir string, meta Meta, node int32, cluster string) error {
	switch meta.ClusterID {
	case cluster:
		return nil
	case "":
		return writeMeta(dir, Meta{NodeID: node, ClusterID: cluster})
	}
	return fmt.Errorf("data dir %s belongs to cluster %s, but its metadata is cluster %s (%s: cluster.id=%s; the data was replaced or lost)",
		dir, meta.ClusterID, cluster, metaPropsFile, meta.ClusterID)
}

func readMeta(dir string) (meta Meta, found bool, err error) {
	path := filepath.Join(dir, metaPropsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return meta, false, nil
	} else if err != nil {
		return meta, false, err
	}
	defer f.Close()
	props, err := properties.Read(f)
	if err != nil {
		return meta, false, fmt.Errorf("%s: %w", path, err)
	}
	if v := props["version"]; v != "1" {
		return meta, false, fmt.Errorf("%s: version=%q, want 1 (KRaft)", path, v)
	}
	id, err := strconv.ParseInt(props["node.id"], 10, 32)
	if err != nil {
		return meta, false, fmt.Errorf("%s: node.id=%q: %w", path, props["node.id"], err)
	}
	return Meta{NodeID: int32(id), ClusterID: props["cluster.id"]}, true, nil
}

// writeMeta replaces meta.properties atomically and durably.
func writeMeta(dir string, meta Meta) error {
	var b strings.Builder
	b.WriteString("#\n#Written by Tandem: the node and cluster this data dir belongs to.\n")
	if meta.ClusterID != "" {
		fmt.Fprintf(&b, "cluster.id=%s\n", meta.ClusterID)
	}
	fmt.Fprintf(&b, "node.id=%d\nversion=1\n", meta.NodeID)

	path := filepath.Join(dir, metaPropsFile)
	tmp := path + ".tmp"
	err := func() error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(b.String()); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// errInUse is the error for a data dir another broker has locked.
func errInUse(dir string) error {
	data, _ := os.ReadFile(filepath.Join(dir, lockFile))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
		return fmt.Errorf("data dir %s is in use by another Tandem (pid %d)", dir, pid)
	}
	return fmt.Errorf("data dir %s is in use by another Tandem", dir)
}
