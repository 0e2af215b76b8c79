package engine

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFileWrite is the machine's cost of the segment files' write
// pattern without the engine: 6 files appended to with one pwrite per
// batch, the size of a batch a produce request carries, and either
// fdatasync running beside the writes (the syncer's rounds, as Tandem
// does) or after each write (as kfake with SyncWrites does). cpu-ns/B is
// the process's CPU (user and system) per byte written: what a broker's
// profile attributes to pwrite and fdatasync.
func BenchmarkFileWrite(b *testing.B) {
	for _, c := range []struct {
		size   int
		inline bool // fdatasync after each write instead of beside them
	}{{16<<10 + 61, false}, {16<<10 + 61, true}, {256<<10 + 61, false}, {256<<10 + 61, true}} {
		size := c.size
		name := fmt.Sprintf("%d/sync-beside", size)
		if c.inline {
			name = fmt.Sprintf("%d/sync-each", size)
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			var files []*os.File
			for i := range 6 {
				f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				files = append(files, f)
			}
			buf := make([]byte, size)
			rand.Read(buf)
			stop := make(chan struct{})
			synced := make(chan struct{})
			go func() {
				defer close(synced)
				for !c.inline {
					select {
					case <-stop:
						return
					default:
					}
					for _, f := range files {
						syscall.Fdatasync(int(f.Fd())) //nolint:errcheck // load, not what is measured
					}
				}
			}()
			offs := make([]int64, len(files))
			b.SetBytes(int64(size))
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				f := i % len(files)
				if _, err := files[f].WriteAt(buf, offs[f]); err != nil {
					b.Fatal(err)
				}
				if c.inline {
					syscall.Fdatasync(int(files[f].Fd())) //nolint:errcheck // what is measured is its cost
				}
				offs[f] += int64(size)
			}
			b.StopTimer()
			close(stop)
			<-synced
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(size), "cpu-ns/B")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // cannot fail for RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
