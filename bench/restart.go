package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RestartResult is how long a Tandem broker took to serve again after a
// SIGKILL under produce load, with a large log on disk.
type RestartResult struct {
	DiskBytes int64         // the data directory when it was killed
	Serving   time.Duration // from the restarted process's start to its listener serving
	FirstAck  time.Duration // from the start to the first produce acknowledged
}

// measureRestart fills a Tandem broker with a log of bytes (1 KiB records
// on 6 partitions, acks=all), kills it with SIGKILL while a producer is
// writing, and times its restart on the same data directory.
func (r *Runner) measureRestart(ctx context.Context, dir string, bytes int64) (*RestartResult, error) {
	argv, err := r.brokerArgv()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b, err := spawnBroker(ctx, argv, "tandem", dir, r.Sync, r.Props, "")
	if err != nil {
		return nil, err
	}
	w := Workload{Kind: Produce, RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none", Duration: time.Hour, Runs: 1, Seed: r.Seed}
	topic := "restart"
	if err := createTopic(ctx, b.Addr, topic, w.Partitions, 1); err != nil {
		b.Stop()
		return nil, err
	}
	p := newPayloads(r.Seed, w.RecordSize)
	r.logf("restart: filling %d MiB", bytes>>20)
	if _, err := produce(ctx, b.Addr, topic, w, p, produceOpts{maxBytes: bytes}); err != nil {
		b.Stop()
		return nil, fmt.Errorf("fill: %w", err)
	}
	// Kill it in the middle of a produce load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		lw := w
		lw.Duration = time.Minute
		produce(loadCtx, b.Addr, topic, lw, p, produceOpts{})
	}()
	time.Sleep(2 * time.Second)
	b.proc.Kill()
	stopLoad()
	<-loadDone
	res := &RestartResult{}
	filepath.WalkDir(filepath.Join(dir, "data"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				res.DiskBytes += fi.Size()
			}
		}
		return nil
	})
	os.Remove(filepath.Join(dir, "ready"))
	start := time.Now()
	b, err = spawnBroker(ctx, argv, "tandem", dir, r.Sync, r.Props, "")
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	defer b.Stop()
	res.Serving = time.Since(start)
	cl, err := kgo.NewClient(producerOpts(b.Addr, topic, w)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, p.record(0, time.Now())).FirstErr(); err != nil {
		return nil, fmt.Errorf("produce after the restart: %w", err)
	}
	res.FirstAck = time.Since(start)
	r.logf("restart: %d MiB on disk, serving after %v, first produce acknowledged after %v",
		res.DiskBytes>>20, res.Serving.Round(time.Millisecond), res.FirstAck.Round(time.Millisecond))
	return res, nil
}

func (rep *Report) restartTable() *table {
	t := &table{head: []string{"on disk", "restart after kill -9: serving", "first produce acknowledged"}}
	if r := rep.Restart; r != nil {
		t.add(fmt.Sprintf("%.1f GiB", float64(r.DiskBytes)/(1<<30)), ms(r.Serving)+" ms", ms(r.FirstAck)+" ms")
	}
	return t
}
