package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestKcat produces 100,000 keyed lines with kcat (librdkafka), checks
// kcat's view of the metadata, and consumes everything back with kcat.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is required (apt-get install -y kcat): %v", err)
	}
	p := tandemtest.StartProcess(t, t.TempDir())
	const topic = "kcat"
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Produce: "key:value" lines, partitioned by librdkafka's key hash.
	var in bytes.Buffer
	for i := range numRecords {
		key, value, _ := genRecord(i)
		fmt.Fprintf(&in, "%s:%s\n", key, value)
	}
	file := filepath.Join(t.TempDir(), "records.txt")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, kcat, "-P", "-b", p.Addr, "-t", topic, "-K", ":",
		"-X", "acks=all", "-X", "linger.ms=5", "-l", file).CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}

	// Metadata as kcat (librdkafka) sees it.
	out, err = exec.CommandContext(ctx, kcat, "-L", "-J", "-b", p.Addr, "-t", topic).Output()
	if err != nil {
		t.Fatalf("kcat -L: %v\n%s", err, out)
	}
	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Error      string `json:"error"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				Leader    int32 `json:"leader"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat -L -J output: %v\n%s", err, out)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].ID != 1 || md.Brokers[0].Name != p.Addr {
		t.Errorf("kcat -L brokers: %+v, want id 1 at %s", md.Brokers, p.Addr)
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != topic || md.Topics[0].Error != "" || len(md.Topics[0].Partitions) != numPartitions {
		t.Fatalf("kcat -L topics: %s", out)
	}
	for _, part := range md.Topics[0].Partitions {
		if part.Leader != 1 {
			t.Errorf("partition %d: leader %d, want 1", part.Partition, part.Leader)
		}
	}

	// Consume everything back.
	cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
	defer ccancel()
	cmd := exec.CommandContext(cctx, kcat, "-C", "-b", p.Addr, "-t", topic, "-o", "beginning", "-e",
		"-f", `%p %o %k %s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(numRecords, false, nil)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := bytes.SplitN(sc.Bytes(), []byte(" "), 4)
		if len(f) != 4 {
			t.Fatalf("kcat -C line %q", sc.Bytes())
		}
		part, err1 := strconv.ParseInt(string(f[0]), 10, 32)
		off, err2 := strconv.ParseInt(string(f[1]), 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("kcat -C line %q", sc.Bytes())
		}
		v.add(int32(part), off, bytes.Clone(f[2]), bytes.Clone(f[3]), nil)
	}
	if err := sc.Err(); err != nil {
		cmd.Process.Kill()
		t.Fatalf("reading kcat -C output: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kcat -C: %v after %d records\n%s", err, v.count, stderr.Bytes())
	}
	v.finish(t, endOffsets(t, p.Addr, topic))
}
