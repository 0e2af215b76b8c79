// Package limits measures what this machine can do without a broker:
// the ceilings tandem bench sets a broker's figures against (loopback
// TCP, file appends with and without fdatasync, Pebble's grouped
// commits, and the mirror pipe of a catch-up).
package limits

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	// MirrorPipe is the least a mirror's catch-up does, without Kafka
	// and in one process on this machine's cores: a file in the page
	// cache sent over loopback TCP with sendfile (as a source broker
	// serves a Fetch), read on the other end, its CRC-32C computed and
	// appended to a file with an fdatasync every 8 MiB.
	MirrorPipe float64
}

// Measure runs each limit for d, using dir for files and chunk (1 MiB
// of the run's payload) as the bytes written; the Pebble limit writes
// its first 1 KiB as each value.
func Measure(dir string, d time.Duration, chunk []byte) (*Limits, error) {
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
	if l.MirrorPipe, err = MirrorPipe(dir, chunk, d); err != nil {
		return nil, fmt.Errorf("mirror pipe limit: %w", err)
	}
	return l, nil
}

// MirrorPipe measures Limits.MirrorPipe for d.
func MirrorPipe(dir string, chunk []byte, d time.Duration) (float64, error) {
	src := filepath.Join(dir, "pipe-source")
	f, err := os.Create(src)
	if err != nil {
		return 0, err
	}
	defer os.Remove(src)
	for range 64 { // 64 MiB, sent again and again
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return 0, err
		}
	}
	f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	sent := make(chan error, 1)
	go func() { sent <- sendFileLoop(ln, src, d) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, elapsed, err := crcAppend(c, filepath.Join(dir, "pipe-dest"))
	if err := errors.Join(err, <-sent); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// sendFileLoop accepts one connection and sends file on it (sendfile, by
// io.Copy to a TCP connection) until d has passed.
func sendFileLoop(ln net.Listener, file string, d time.Duration) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	for start := time.Now(); time.Since(start) < d; {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		_, err = io.Copy(c, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// crcAppend reads c to its end, computing each MiB's CRC-32C and
// appending it to file with an fdatasync every 8 MiB.
func crcAppend(c net.Conn, file string) (n int64, elapsed time.Duration, err error) {
	f, err := os.Create(file)
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(file)
	defer f.Close()
	buf := make([]byte, 1<<20)
	table := crc32.MakeTable(crc32.Castagnoli)
	start := time.Now()
	for {
		m, rerr := io.ReadFull(c, buf)
		if m > 0 {
			crc32.Checksum(buf[:m], table)
			if _, err := f.Write(buf[:m]); err != nil {
				return 0, 0, err
			}
			if n += int64(m); n%(8<<20) == 0 {
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					return 0, 0, fmt.Errorf("fdatasync: %w", err)
				}
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return n, time.Since(start), syscall.Fdatasync(int(f.Fd()))
		}
		if rerr != nil {
			return 0, 0, rerr
		}
	}
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
