package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Limits are what this machine can do without a broker: the ceilings a
// broker's figures are compared with. All in bytes per second.
type Limits struct {
	LoopbackTCP      float64 // one writer, one reader, 1 MiB writes
	FileAppend       float64 // sequential 1 MiB appends, no sync
	FileAppendSync   float64 // the same with fdatasync after every 1 MiB
	PebbleAppend     float64 // 1 KiB values, 64 MiB memtable, concurrent Sync commits
	PebbleValueBytes int     // value size of the Pebble limit
}

// measureLimits runs each limit for d, using dir for files.
func measureLimits(dir string, d time.Duration, seed int64) (*Limits, error) {
	chunk := make([]byte, 1<<20)
	for i, p := 0, newPayloads(seed, 1024); i < len(chunk); i += 1024 {
		copy(chunk[i:], p.vals[(i/1024)%len(p.vals)])
	}
	l := &Limits{PebbleValueBytes: 1024}
	var err error
	if l.LoopbackTCP, err = loopbackTCP(chunk, d); err != nil {
		return nil, fmt.Errorf("loopback limit: %w", err)
	}
	if l.FileAppend, err = fileAppend(filepath.Join(dir, "append"), chunk, d, false); err != nil {
		return nil, fmt.Errorf("file append limit: %w", err)
	}
	if l.FileAppendSync, err = fileAppend(filepath.Join(dir, "append-sync"), chunk, d, true); err != nil {
		return nil, fmt.Errorf("file append+fdatasync limit: %w", err)
	}
	if l.PebbleAppend, err = pebbleAppend(filepath.Join(dir, "pebble"), chunk[:1024], d); err != nil {
		return nil, fmt.Errorf("pebble limit: %w", err)
	}
	return l, nil
}

func loopbackTCP(chunk []byte, d time.Duration) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		got <- result{n, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(chunk); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.Close()
	r := <-got
	if r.err != nil {
		return 0, r.err
	}
	return float64(r.n) / time.Since(start).Seconds(), nil
}

func fileAppend(path string, chunk []byte, d time.Duration, sync bool) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.Write(chunk); err != nil {
			return 0, err
		}
		n += int64(len(chunk))
		if sync {
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				return 0, fmt.Errorf("fdatasync: %w", err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// pebbleAppend commits batches of 256 values with Sync from four
// writers at once, so that Pebble's commit pipeline groups their syncs, as
// the engine's concurrent produce requests do.
func pebbleAppend(dir string, value []byte, d time.Duration) (float64, error) {
	return pebbleAppendN(dir, value, d, 4, 256)
}

func pebbleAppendN(dir string, value []byte, d time.Duration, writers, perBatch int) (float64, error) {
	db, err := pebble.Open(dir, &pebble.Options{MemTableSize: 64 << 20, Logger: quietLogger{}})
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, writers)
	)
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := make([]byte, 16)
			binary.BigEndian.PutUint64(key, uint64(w))
			for seq := uint64(0); time.Since(start) < d; {
				b := db.NewBatch()
				for range perBatch {
					binary.BigEndian.PutUint64(key[8:], seq)
					seq++
					if err := b.Set(key, value, nil); err != nil {
						errs[w] = err
						return
					}
				}
				if err := b.Commit(pebble.Sync); err != nil {
					errs[w] = err
					return
				}
				b.Close()
				n.Add(int64(perBatch * len(value)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(append(errs, db.Close())...); err != nil {
		return 0, err
	}
	return float64(n.Load()) / elapsed.Seconds(), nil
}

// quietLogger keeps Pebble's informational lines out of the report.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(f string, args ...any) { fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", args...) }
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf("pebble: "+f, args...)) }
