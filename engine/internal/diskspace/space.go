// Package diskspace is the engine's disk-space reserve: it watches the free
// space of the data directory's filesystem, refuses client writes before
// the disk is full and keeps a ballast file for the broker's own writes.
package diskspace

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A full disk must not stop the broker: client writes are refused with
// KAFKA_STORAGE_ERROR before the disk is full, while a reserve of free
// space remains for what keeps the broker serving and lets an operator
// free space through the Kafka API: the metadata quorum, Pebble's
// flushes, consumer-group and transaction coordinators, DeleteRecords and
// DeleteTopics. A ballast file of the reserve's size is kept in the data
// directory, and deleted when a write meets ENOSPC anyway or when the
// broker starts on a full disk, so that Pebble can recover and the
// broker reach its listeners (CockroachDB's emergency ballast). Writes
// resume once the free space is back above the reserve, and the ballast
// is recreated once there is room for it too.
const (
	ballastName   = "tandem-reserve"
	minReserve    = 8 << 20
	maxReserve    = 256 << 20
	checkInterval = time.Second
)

// Space watches the free space of the data directory's filesystem.
type Space struct {
	fs      vfs.FS // the unwrapped filesystem: the ballast is removed beneath the ENOSPC handler
	dir     string
	ballast string
	log     *slog.Logger

	full      atomic.Bool
	avail     atomic.Uint64
	supported atomic.Bool // the filesystem reports its usage
	// written counts bytes appended since the last check; a check is due
	// when it passes due.
	written atomic.Int64
	due     atomic.Int64

	mu      sync.Mutex // one check at a time
	reserve int64

	bgErrors atomic.Int32 // consecutive ENOSPC background errors of Pebble
}

func New(fs vfs.FS, dir string, log *slog.Logger) *Space {
	s := &Space{fs: fs, dir: dir, ballast: fs.PathJoin(dir, ballastName), log: log}
	s.check()
	if s.full.Load() {
		// Starting on a full disk: give the ballast's room to Pebble's
		// recovery and the start's metadata writes.
		s.removeBallast("the broker starts on a full disk")
	}
	return s
}

// Allow says whether an append may be written now; own says it is one of
// the broker's own writes (coordinators, transaction markers that end
// transactions, a mirror's failover markers), which are small and go into
// the reserve; clients and copies of other logs wait for space.
func (s *Space) Allow(own bool) error {
	if s.written.Load() >= s.due.Load() {
		s.check()
	}
	if !s.full.Load() || own {
		return nil
	}
	return storageError("disk full: %d bytes free in %s, below the %d kept for the broker's own writes; delete records or topics to free space",
		s.avail.Load(), s.dir, s.reserve)
}

func (s *Space) Wrote(n int) { s.written.Add(int64(n)) }

// Freed asks for a check at the next append (after deleting data).
func (s *Space) Freed() { s.due.Store(0) }

// Disk returns the total and available bytes of the data dir's
// filesystem; ok is false where the filesystem has no such figures.
func (s *Space) Disk() (total, avail int64, ok bool) {
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return 0, 0, false
	}
	return int64(du.TotalBytes), int64(du.AvailBytes), true
}

func (s *Space) IsFull() bool { return s.full.Load() }

func (s *Space) Free() uint64 { return s.avail.Load() }

// check measures the free space and updates the state. Appends call it
// every few megabytes written, the background loop every second.
func (s *Space) check() {
	if !s.mu.TryLock() {
		return // a check is running
	}
	defer s.mu.Unlock()
	s.written.Store(0)
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		// No usage figures (an in-memory filesystem): only ENOSPC says
		// the disk is full. Check again in a while.
		s.supported.Store(false)
		s.due.Store(64 << 20)
		return
	}
	s.supported.Store(true)
	s.reserve = min(max(int64(du.TotalBytes)/20, minReserve), maxReserve)
	avail := int64(du.AvailBytes)
	_, berr := s.fs.Stat(s.ballast)
	haveBallast := berr == nil
	need := s.reserve
	if !haveBallast {
		need += s.reserve
	}
	wasFull := s.full.Load()
	if avail >= need && !haveBallast {
		if err := s.createBallast(); err != nil {
			s.log.Warn("cannot create the disk reserve file", "path", s.ballast, "err", err)
		} else if du, err = s.fs.GetDiskUsage(s.dir); err == nil {
			avail = int64(du.AvailBytes)
		}
	}
	s.avail.Store(uint64(max(avail, 0)))
	full := avail < need
	s.full.Store(full)
	if full != wasFull {
		if full {
			s.log.Error("disk full: refusing writes from clients", "dir", s.dir, "free_bytes", avail, "reserve_bytes", s.reserve)
		} else {
			s.log.Info("disk space is back: accepting writes", "dir", s.dir, "free_bytes", avail)
		}
	}
	// The next check after a quarter of what is left above the reserve
	// is written (at least every MiB near the limit).
	s.due.Store(max((avail-need)/4, 1<<20))
}

func (s *Space) createBallast() error {
	tmp := s.ballast + segfile.TmpSuffix
	f, err := s.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	err = f.Preallocate(0, s.reserve)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, s.ballast)
	}
	if err != nil {
		s.fs.Remove(tmp)
		return fmt.Errorf("create %s: %w", s.ballast, err)
	}
	return nil
}

func (s *Space) removeBallast(why string) {
	if _, err := s.fs.Stat(s.ballast); err != nil {
		return
	}
	if err := s.fs.Remove(s.ballast); err != nil {
		s.log.Error("cannot remove the disk reserve file", "path", s.ballast, "err", err)
		return
	}
	s.log.Error("disk full: removed the disk reserve file to keep the broker running", "path", s.ballast, "reason", why)
}

// OnDiskFull is called by the filesystem wrapper when a write meets
// ENOSPC, before the write is retried once: free the ballast.
func (s *Space) OnDiskFull() {
	s.full.Store(true)
	s.removeBallast("a write ran out of space")
	s.due.Store(0)
}

// NoteWriteError records a failed segment write or sync.
func (s *Space) NoteWriteError(err error) {
	if isNoSpace(err) {
		s.full.Store(true)
		s.due.Store(0)
	}
}

// Run checks the free space every second, so that a full disk is noticed
// when space comes back without an append to trigger the check.
func (s *Space) Run(stop <-chan struct{}) {
	t := time.NewTicker(checkInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if s.full.Load() || s.supported.Load() {
				s.check()
			}
		}
	}
}

// BackgroundError is Pebble's hook for failed flushes and compactions.
// Pebble retries a failed flush at once, without backoff: on a full disk
// that is a loop writing and deleting empty tables hundreds of times a
// second. The hook runs on the flushing goroutine, so sleeping here is
// the backoff (up to a second; commits wait meanwhile, as they would on
// the flush anyway).
func (s *Space) BackgroundError(err error) {
	if !isNoSpace(err) {
		s.log.Error("pebble background error", "err", err)
		return
	}
	s.full.Store(true)
	n := s.bgErrors.Add(1)
	if n == 1 || n%60 == 0 {
		s.log.Error("pebble: no space left for a flush or compaction; retrying with backoff", "attempts", n, "err", err)
	}
	time.Sleep(min(time.Duration(n)*50*time.Millisecond, time.Second))
}

func (s *Space) BackgroundOK() { s.bgErrors.Store(0) }

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// storageError is the error of a write refused for lack of space:
// KAFKA_STORAGE_ERROR, which clients retry (the engine's own
// storageError).
func storageError(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, kerr.KafkaStorageError)...)
}
