package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// The environment of TestMirrorHelperDestination, the destination broker
// that TestMirrorStopCrashAtEachStep runs as a child process.
const (
	helperDir   = "TANDEM_MIRROR_HELPER_DIR"   // data dir
	helperReady = "TANDEM_MIRROR_HELPER_READY" // file to write the bound address to
	helperCrash = "TANDEM_MIRROR_HELPER_CRASH" // topic/step after which it kills itself
)

// TestMirrorHelperDestination is not a test: it is the destination broker
// of TestMirrorStopCrashAtEachStep, run as a child process, which SIGKILLs
// itself right after one step of one topic's failover sequence.
func TestMirrorHelperDestination(t *testing.T) {
	dir := os.Getenv(helperDir)
	if dir == "" {
		t.Skip("run by TestMirrorStopCrashAtEachStep")
	}
	topic, step, _ := strings.Cut(os.Getenv(helperCrash), "/")
	hook := mirror.WithStopHook(func(tp string, _ int32, s mirror.StopStep) {
		if tp == topic && string(s) == step {
			os.WriteFile(os.Getenv(helperReady)+".killed", []byte(s), 0o644) //nolint:errcheck // the parent checks it
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // dead before this returns
		}
	})
	log := tandemtest.Logger(t)
	b, err := server.New(server.Config{DataDir: dir, Listen: "127.0.0.1:0", Props: mirrorProps, Logger: log,
		Plugins: []any{groups.New(mirrorProps, log), txn.New(mirrorProps, log), mirror.New(mirrorProps, log, hook)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(helperReady), []byte(b.Addr()), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Minute) // the parent kills it long before
	t.Fatal("not killed")
}

// startHelper runs TestMirrorHelperDestination on dir and returns its
// address, a channel closed when it exits, and the file in which it
// names the step it killed itself after.
func startHelper(t *testing.T, dir, crash string) (string, <-chan struct{}, string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^TestMirrorHelperDestination$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDir+"="+dir, helperReady+"="+ready, helperCrash+"="+crash)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	var addr []byte
	waitFor(t, 30*time.Second, "the helper destination to start", func() bool {
		addr, _ = os.ReadFile(ready)
		return len(addr) > 0
	})
	return string(addr), done, ready + ".killed"
}

// openDestination starts an in-process destination on dir.
func openDestination(t *testing.T, dir string) *mirrorCluster {
	c := &mirrorCluster{t: t, dir: dir, listen: "127.0.0.1:0", props: maps.Clone(mirrorProps)}
	c.start()
	return c
}

// controlBatches counts a log's producer-state barriers (control batches
// of producer id -1) and transaction markers.
func controlBatches(t *testing.T, ep *engine.Partition) (barriers, markers int) {
	for _, b := range batches(t, ep) {
		if binary.BigEndian.Uint16(b[21:])&0x20 == 0 {
			continue
		}
		if int64(binary.BigEndian.Uint64(b[43:])) == -1 {
			barriers++
		} else {
			markers++
		}
	}
	return barriers, markers
}

// TestMirrorStopCrashAtEachStep is defect 5: the destination is killed
// (SIGKILL) right after each step of the failover sequence in turn, one
// topic per step, each with a transaction the source left open. After a
// restart the stop resumes: exactly one barrier, one ABORT marker, the
// source's epoch as the last mirror epoch, the mirrored data intact, and
// the topic takes writes.
func TestMirrorStopCrashAtEachStep(t *testing.T) {
	tandemtest.Long(t) // a cluster restarted per step: the full tier only
	steps := []mirror.StopStep{mirror.StepFetcherRemoved, mirror.StepEpochBumped, mirror.StepTxnsAborted,
		mirror.StepLMEPersisted, mirror.StepBarrierWritten, mirror.StepWritable}
	src := startMirrorCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topics := map[string]string{}
	for i := range steps {
		topic := fmt.Sprintf("s%d", i)
		topics[topic] = "m"
		createMirrorTopic(t, src, topic, 1)
		produceN(t, src.addr(), topic, 1, 30)
		// A transaction left open on the source: the failover aborts it.
		tx := src.client(kgo.DefaultProduceTopic(topic), kgo.TransactionalID("open-"+topic), kgo.TransactionTimeout(2*time.Minute))
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("in an open transaction")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	dst := openDestination(t, dir)
	da := dst.admin()
	if err := da.CreateMirror(ctx, "m", map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	if err := da.AddTopicsToMirror(ctx, topics); err != nil {
		t.Fatal(err)
	}
	for topic := range topics {
		waitMirrored(t, dst, "m", topic, map[int32]int64{0: src.partition(topic, 0).Offsets().LogEnd}, 30*time.Second)
	}
	dst.b.Close()

	for i, step := range steps {
		topic := fmt.Sprintf("s%d", i)
		addr, exited, killed := startHelper(t, dir, topic+"/"+string(step))
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), admin.Opt(), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		admin.New(cl).RemoveTopicsFromMirror(rctx, "m", []string{topic}) //nolint:errcheck // the broker dies under it
		rcancel()
		cl.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the destination did not die after step %s", topic, step)
		}
		if got, _ := os.ReadFile(killed); string(got) != string(step) {
			t.Fatalf("%s: the destination died, but not by its hook after %s (%q)", topic, step, got)
		}

		dst := openDestination(t, dir)
		waitTopicState(t, dst, "m", topic, 1, "STOPPED", 30*time.Second)
		sp, dp := src.partition(topic, 0), dst.partition(topic, 0)
		srcEnd := sp.Offsets().LogEnd
		if got := batches(t, dp); len(got) < len(batches(t, sp)) {
			t.Fatalf("%s (killed after %s): %d batches, the source has %d", topic, step, len(got), len(batches(t, sp)))
		}
		for j, b := range batches(t, sp) {
			if d := batches(t, dp)[j]; string(d) != string(b) {
				t.Fatalf("%s (killed after %s): mirrored batch %d differs", topic, step, j)
			}
		}
		barriers, markers := controlBatches(t, dp)
		if barriers != 1 || markers != 1 {
			t.Fatalf("%s (killed after %s): %d barriers and %d transaction markers, want one of each", topic, step, barriers, markers)
		}
		lmo, err := dst.admin().LastMirroredOffsets(ctx, "m", map[string][]int32{topic: {0}})
		if err != nil {
			t.Fatal(err)
		}
		srcEpoch := sp.EpochAt(srcEnd - 1)
		if p := lmo[0].Partitions[0]; p.LastMirrorEpoch != srcEpoch || p.LastMirroredOffset != srcEnd-1 {
			t.Fatalf("%s (killed after %s): last mirror epoch %d offset %d, want the source's epoch %d and offset %d",
				topic, step, p.LastMirrorEpoch, p.LastMirroredOffset, srcEpoch, srcEnd-1)
		}
		if e := dp.Offsets().LeaderEpoch; e <= srcEpoch {
			t.Fatalf("%s (killed after %s): destination epoch %d not above the source's %d", topic, step, e, srcEpoch)
		}
		if err := produceOne(t, dst, topic, 0, "after failover"); err != nil {
			t.Fatalf("%s (killed after %s): produce after failover: %v", topic, step, err)
		}
		dst.b.Close()
	}
}
