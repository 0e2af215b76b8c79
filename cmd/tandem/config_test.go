package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBrokerConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.properties")
	err := os.WriteFile(file, []byte(strings.Join([]string{
		"node.id=7",
		"log.dirs=/from/file,/second",
		"listeners=PLAINTEXT://127.0.0.1:9300",
		"advertised.listeners=PLAINTEXT://kafka.example:9300",
		"num.partitions=3",
		"message.max.bytes=2000000",
	}, "\n")), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	o := serveOptions{dataDir: "tandem-data", listen: "127.0.0.1:1", nodeID: 1, config: file,
		sets: []string{"num.partitions=12", "log.retention.ms=5"}}
	// --listen given on the command line: the file's listeners must not win.
	cfg, err := o.brokerConfig(map[string]bool{"listen": true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != 7 || cfg.DataDir != "/from/file" || cfg.Listen != "127.0.0.1:1" || cfg.Advertise != "kafka.example:9300" {
		t.Fatalf("flags from file: got node %d dir %q listen %q advertise %q", cfg.NodeID, cfg.DataDir, cfg.Listen, cfg.Advertise)
	}
	wantProps := map[string]string{"num.partitions": "12", "message.max.bytes": "2000000", "log.retention.ms": "5"}
	if !reflect.DeepEqual(cfg.Props, wantProps) {
		t.Fatalf("props: got %v, want %v", cfg.Props, wantProps)
	}

	bad := serveOptions{dataDir: "d", sets: []string{"node.id=x"}}
	if _, err := bad.brokerConfig(nil); err == nil || !strings.Contains(err.Error(), "node.id") {
		t.Fatalf("want an error naming node.id, got %v", err)
	}
}
