// Package segfile is a partition's segment files as files: their names,
// the bounded table of open files the engine reads and appends through,
// the walk over a segment's batch headers and the read of a whole batch,
// the listing of a partition's segments, truncation, directory syncs, and
// sendfile(2) for fetches.
package segfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

const (
	segmentSuffix = ".log"
	// CleanedSuffix marks a compacted copy of a segment being written;
	// renamed over the segment once complete.
	CleanedSuffix = ".cleaned"
	TmpSuffix     = ".tmp"
	// maxBatchSize bounds what recovery and reads accept as a batch
	// length, so that a corrupt header never allocates gigabytes.
	maxBatchSize = 1 << 30
	// headerPeek is the part of a batch header a walk over a segment
	// reads: up to the producer ID (a truncation reopens transactions).
	headerPeek = recordbatch.OffProducerID + 8
)

func Name(base int64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(s, 10, 64)
	return base, err == nil && base >= 0
}

// File is a segment file opened on demand. The engine keeps a bounded
// number of files open (a broker with 10,000 partitions must not hold
// 10,000 descriptors); readers and the writer hold a reference while they
// use it, and a file is only closed when unreferenced.
type File struct {
	Path string
	// Guarded by Table.mu.
	f    vfs.File
	refs int
	RW   bool // open read-write: the segment may be appended to
	// gone: the file was deleted or replaced (truncation, compaction).
	// It is closed once unreferenced and never reopened under this name.
	gone       bool
	prev, next *File // the LRU list of open, unreferenced files
}

// Table bounds the open segment files.
type Table struct {
	fs  vfs.FS
	max int

	mu   sync.Mutex
	open int
	lru  File // sentinel: lru.next is the most recently released
}

func NewTable(fs vfs.FS, max int) *Table {
	t := &Table{fs: fs, max: max}
	t.lru.next, t.lru.prev = &t.lru, &t.lru
	return t
}

var ErrFileGone = errors.New("segment file deleted")

// Acquire returns the open file and holds a reference to it.
func (t *Table) Acquire(sf *File) (vfs.File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sf.gone {
		return nil, fmt.Errorf("%s: %w", sf.Path, ErrFileGone)
	}
	if sf.f == nil {
		var f vfs.File
		var err error
		if sf.RW {
			f, err = t.fs.OpenReadWrite(sf.Path, vfs.WriteCategoryUnspecified)
		} else {
			f, err = t.fs.Open(sf.Path)
		}
		if err != nil {
			return nil, fmt.Errorf("open segment: %w", err)
		}
		sf.f = f
		t.open++
		t.evictLocked()
	} else if sf.refs == 0 {
		t.unlinkLocked(sf)
	}
	sf.refs++
	return sf.f, nil
}

// Release drops a reference taken by Acquire.
func (t *Table) Release(sf *File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sf.refs--
	if sf.refs > 0 {
		return
	}
	if sf.refs < 0 {
		panic("engine: segment file released more often than acquired")
	}
	if sf.gone {
		t.closeLocked(sf)
		return
	}
	t.pushLocked(sf)
}

// Adopt registers a file just created, open and unreferenced.
func (t *Table) Adopt(path string, f vfs.File) *File {
	sf := &File{Path: path, f: f, RW: true}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open++
	t.pushLocked(sf)
	return sf
}

// pushLocked puts an unreferenced open file first in the LRU list and
// closes the least recently used ones above the bound.
func (t *Table) pushLocked(sf *File) {
	sf.next, sf.prev = t.lru.next, &t.lru
	sf.next.prev, t.lru.next = sf, sf
	t.evictLocked()
}

// Retire marks the file deleted or replaced: closed now if unreferenced,
// else by the last release.
func (t *Table) Retire(sf *File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sf.gone {
		return
	}
	sf.gone = true
	if sf.f != nil && sf.refs == 0 {
		t.unlinkLocked(sf)
		t.closeLocked(sf)
	}
}

func (t *Table) evictLocked() {
	for t.open > t.max && t.lru.prev != &t.lru {
		sf := t.lru.prev
		t.unlinkLocked(sf)
		t.closeLocked(sf)
	}
}

func (t *Table) unlinkLocked(sf *File) {
	if sf.prev != nil {
		sf.prev.next, sf.next.prev = sf.next, sf.prev
		sf.prev, sf.next = nil, nil
	}
}

func (t *Table) closeLocked(sf *File) {
	if sf.f != nil {
		sf.f.Close()
		sf.f = nil
		t.open--
	}
}

// CloseAll closes every unreferenced file (Close of the engine).
func (t *Table) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.lru.prev != &t.lru {
		sf := t.lru.prev
		t.unlinkLocked(sf)
		t.closeLocked(sf)
	}
}

// Open is the number of segment files open.
func (t *Table) Open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// Header is what a walk over a segment reads of each batch.
type Header struct {
	Base, Last int64
	Size       int64 // the whole batch: 12 + its length field
	MaxTs      int64
	Epoch      int32
	Attrs      int16
	PID        int64
}

// HeaderReader reads batch headers of a segment through a small buffer,
// so that a walk over small batches costs one read per few kilobytes.
type HeaderReader struct {
	F    vfs.File
	End  int64 // readable bytes of the file
	buf  *[64 << 10]byte
	at   int64 // buf holds the file's bytes [at, at+n)
	n    int64
	last int64 // size of the last batch read
}

var headerBufs = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// Release returns the reader's buffer (reads may follow; they take
// another).
func (r *HeaderReader) Release() {
	if r.buf != nil {
		headerBufs.Put(r.buf)
		r.buf, r.n = nil, 0
	}
}

var ErrTorn = errors.New("torn or corrupt batch")

// Header reads the header of the batch at pos. It fails with ErrTorn when
// the header is not that of a whole batch ending by end, and with io.EOF
// when pos is end.
func (r *HeaderReader) Header(pos int64) (Header, error) {
	if pos >= r.End {
		return Header{}, io.EOF
	}
	if pos+headerPeek > r.End {
		return Header{}, ErrTorn
	}
	if r.buf == nil {
		r.buf = headerBufs.Get().(*[64 << 10]byte)
	}
	if pos < r.at || pos+headerPeek > r.at+r.n {
		// Small batches: many headers per read. Large ones: a read per
		// header, without copying much of the batch.
		size := int64(4 << 10)
		if r.last > 0 && r.last < size {
			size = int64(len(r.buf))
		}
		n, err := r.F.ReadAt(r.buf[:min(size, r.End-pos)], pos)
		if n < headerPeek {
			if err == nil || err == io.EOF {
				err = ErrTorn
			}
			return Header{}, err
		}
		r.at, r.n = pos, int64(n)
	}
	h := recordbatch.Batch(r.buf[pos-r.at : pos-r.at+headerPeek])
	length := int64(int32(binary.BigEndian.Uint32(h[recordbatch.OffBatchLength:])))
	if length < recordbatch.HeaderLen-12 || length > maxBatchSize || pos+12+length > r.End || h[recordbatch.OffMagic] != 2 || h.LastOffsetDelta() < 0 || h.BaseOffset() < 0 {
		return Header{}, ErrTorn
	}
	r.last = 12 + length
	return Header{Base: h.BaseOffset(), Last: h.LastOffset(), Size: 12 + length, MaxTs: h.MaxTimestamp(), Epoch: h.LeaderEpoch(),
		Attrs: h.Attributes(), PID: h.ProducerID()}, nil
}

// ReadBatch reads and checks the whole batch at pos (recovery).
func ReadBatch(f vfs.File, pos int64, h Header, buf []byte) (recordbatch.Batch, error) {
	if int64(cap(buf)) < h.Size {
		buf = make([]byte, h.Size)
	}
	buf = buf[:h.Size]
	if _, err := f.ReadAt(buf, pos); err != nil {
		return nil, ErrTorn
	}
	bs, err := recordbatch.Split(buf)
	if err != nil || len(bs) != 1 {
		return nil, ErrTorn
	}
	return bs[0], nil
}

// List returns the bases of the segment files in dir, sorted, and
// removes what an interrupted compaction or truncation left behind.
func List(fs vfs.FS, dir string) ([]int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var bases []int64
	for _, n := range names {
		if base, ok := parseSegmentName(n); ok {
			bases = append(bases, base)
		} else if strings.HasSuffix(n, CleanedSuffix) || strings.HasSuffix(n, TmpSuffix) {
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
				return nil, fmt.Errorf("remove %s: %w", n, err)
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// Truncate cuts the file at size and syncs it. Files on disk are cut
// in place; others (the in-memory filesystem of tests, which has no
// truncation) are rewritten and renamed, so replaced is true and the
// caller must reopen the file.
func Truncate(fs vfs.FS, f vfs.File, path string, size int64) (replaced bool, err error) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		if err := syscall.Ftruncate(int(fd), size); err != nil {
			return false, fmt.Errorf("truncate %s to %d: %w", path, size, err)
		}
		return false, f.SyncData()
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !(err == io.EOF && size == 0) {
		return false, fmt.Errorf("truncate %s: read: %w", path, err)
	}
	tmp := path + TmpSuffix
	nf, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false, fmt.Errorf("truncate %s: %w", path, err)
	}
	_, err = nf.Write(buf)
	if err == nil {
		err = nf.Sync()
	}
	nf.Close()
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(fs, fs.PathDir(path))
	}
	if err != nil {
		return false, fmt.Errorf("truncate %s: %w", path, err)
	}
	return true, nil
}

// SyncDir makes the directory's entries (created, renamed or removed
// files) durable.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// DirSyncs makes a directory's new entries durable once for many
// changes: each change takes a generation, and a sync covers every
// generation taken before it started, so that the partitions created
// between two sync rounds cost the segments' directory one fsync.
type DirSyncs struct {
	Dir    string
	gen    atomic.Int64 // the last generation taken
	synced atomic.Int64 // the last generation known durable
	mu     sync.Mutex   // one sync at a time; the others wait and see it
}

// Changed is called after a change to the directory and returns its
// generation.
func (d *DirSyncs) Changed() int64 { return d.gen.Add(1) }

// Sync returns once the change of generation gen is durable.
func (d *DirSyncs) Sync(fs vfs.FS, gen int64) error {
	if d.synced.Load() >= gen {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.synced.Load() >= gen {
		return nil
	}
	covers := d.gen.Load()
	if err := SyncDir(fs, d.Dir); err != nil {
		return err
	}
	d.synced.Store(covers)
	return nil
}
