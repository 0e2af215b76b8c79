package engine

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
)

// A partition's log is a directory of segment files, named by the offset
// they start at as Kafka names them (00000000000000000000.log), each
// holding record batches back to back exactly as they were appended. The
// last segment is the active one; appends go to its end, and a new one is
// rolled when it reaches segment.bytes or segment.ms. Only the active
// segment's tail can be torn by a crash: a segment is fsynced before the
// next one is created.
const (
	segmentsDir   = "segments"
	segmentSuffix = ".log"
	// cleanedSuffix marks a compacted copy of a segment being written;
	// renamed over the segment once complete.
	cleanedSuffix = ".cleaned"
	tmpSuffix     = ".tmp"
	// indexInterval is Kafka's index.interval.bytes: a sparse index entry
	// at most every 4 KiB of log (and at the start of every segment).
	indexInterval = 4096
	// maxBatchSize bounds what recovery and reads accept as a batch
	// length, so that a corrupt header never allocates gigabytes.
	maxBatchSize = 1 << 30
	// headerPeek is the part of a batch header a walk over a segment
	// reads: up to the producer ID (a truncation reopens transactions).
	headerPeek = offProducerID + 8
)

func segmentName(base int64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(s, 10, 64)
	return base, err == nil && base >= 0
}

func partitionDirName(id TopicID, p int32) string { return fmt.Sprintf("%s-%d", id, p) }

// segment is one segment file and what the engine knows of it.
type segment struct {
	base int64
	file *segFile
	size int64 // bytes of whole batches in the file: where the next append goes
	next int64 // offset after its last batch (base when empty)
	// The largest timestamp in the segment, the offset of its record and
	// its batch's epoch (retention.ms, ListOffsets -3).
	maxTs      int64
	maxTsOff   int64
	maxTsEpoch int32
	created    int64 // unix ms when the segment was rolled (segment.ms)
}

// summary is the segment's Pebble entry (without size, which is the
// file's).
func (s *segment) summary() []byte {
	b := make([]byte, 0, 36)
	b = binary.BigEndian.AppendUint64(b, uint64(s.maxTs))
	b = binary.BigEndian.AppendUint64(b, uint64(s.maxTsOff))
	b = binary.BigEndian.AppendUint32(b, uint32(s.maxTsEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(s.created))
	return binary.BigEndian.AppendUint64(b, uint64(s.next))
}

func (s *segment) decodeSummary(b []byte) error {
	if len(b) != 36 {
		return fmt.Errorf("segment %d summary of %d bytes", s.base, len(b))
	}
	s.maxTs, s.maxTsOff = be64(b), be64(b[8:])
	s.maxTsEpoch = int32(binary.BigEndian.Uint32(b[16:]))
	s.created, s.next = be64(b[20:]), be64(b[28:])
	return nil
}

// noteBatch updates the summary with a batch appended at its end.
func (s *segment) noteBatch(m batchMeta) {
	if s.size == 0 || m.MaxTs > s.maxTs {
		s.maxTs, s.maxTsOff, s.maxTsEpoch = m.MaxTs, m.Base+int64(m.MaxTsDelta), m.Epoch
	}
	s.size += int64(m.Size)
	s.next = m.last() + 1
}

// batchMeta is what the engine keeps of a batch while appending it.
type batchMeta struct {
	Base       int64
	LastDelta  int32
	Size       int32
	MaxTs      int64
	MaxTsDelta int32 // offset delta of the record holding MaxTs
	Epoch      int32
}

func (m batchMeta) last() int64 { return m.Base + int64(m.LastDelta) }

// indexEntry is a sparse index value: the batch's position in its
// segment and the largest timestamp of the segment before it (so that a
// search by timestamp starts at the last entry below the timestamp).
func indexEntry(pos, maxTsBefore int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(pos)), uint64(maxTsBefore))
}

// recoveryPoint is the value of a partition's 'R' key: the index,
// producer state, epochs and aborted transactions in Pebble cover every
// batch before position pos of segment seg, which ends at offset next.
// exact says the log ends there: a truncation may not have reached the
// file before a crash, and recovery must finish it rather than replay
// what follows.
type recoveryPoint struct {
	seg, pos, next int64
	exact          bool
}

func (r recoveryPoint) encode() []byte {
	b := make([]byte, 0, 25)
	b = binary.BigEndian.AppendUint64(b, uint64(r.seg))
	b = binary.BigEndian.AppendUint64(b, uint64(r.pos))
	b = binary.BigEndian.AppendUint64(b, uint64(r.next))
	if r.exact {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeRecoveryPoint(b []byte) (recoveryPoint, error) {
	if len(b) != 25 {
		return recoveryPoint{}, fmt.Errorf("recovery point of %d bytes", len(b))
	}
	return recoveryPoint{seg: be64(b), pos: be64(b[8:]), next: be64(b[16:]), exact: b[24] == 1}, nil
}

// segFile is a segment file opened on demand. The engine keeps a bounded
// number of files open (a broker with 10,000 partitions must not hold
// 10,000 descriptors); readers and the writer hold a reference while they
// use it, and a file is only closed when unreferenced.
type segFile struct {
	path string
	// Guarded by fileTable.mu.
	f    vfs.File
	refs int
	rw   bool // open read-write: the segment may be appended to
	// gone: the file was deleted or replaced (truncation, compaction).
	// It is closed once unreferenced and never reopened under this name.
	gone       bool
	prev, next *segFile // the LRU list of open, unreferenced files
}

// fileTable bounds the open segment files.
type fileTable struct {
	fs  vfs.FS
	max int

	mu   sync.Mutex
	open int
	lru  segFile // sentinel: lru.next is the most recently released
}

func newFileTable(fs vfs.FS, max int) *fileTable {
	t := &fileTable{fs: fs, max: max}
	t.lru.next, t.lru.prev = &t.lru, &t.lru
	return t
}

var errFileGone = errors.New("segment file deleted")

// acquire returns the open file and holds a reference to it.
func (t *fileTable) acquire(sf *segFile) (vfs.File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sf.gone {
		return nil, fmt.Errorf("%s: %w", sf.path, errFileGone)
	}
	if sf.f == nil {
		var f vfs.File
		var err error
		if sf.rw {
			f, err = t.fs.OpenReadWrite(sf.path, vfs.WriteCategoryUnspecified)
		} else {
			f, err = t.fs.Open(sf.path)
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

// release drops a reference taken by acquire.
func (t *fileTable) release(sf *segFile) {
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

// adopt registers a file just created, open and unreferenced.
func (t *fileTable) adopt(path string, f vfs.File) *segFile {
	sf := &segFile{path: path, f: f, rw: true}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open++
	t.pushLocked(sf)
	return sf
}

// pushLocked puts an unreferenced open file first in the LRU list and
// closes the least recently used ones above the bound.
func (t *fileTable) pushLocked(sf *segFile) {
	sf.next, sf.prev = t.lru.next, &t.lru
	sf.next.prev, t.lru.next = sf, sf
	t.evictLocked()
}

// retire marks the file deleted or replaced: closed now if unreferenced,
// else by the last release.
func (t *fileTable) retire(sf *segFile) {
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

func (t *fileTable) evictLocked() {
	for t.open > t.max && t.lru.prev != &t.lru {
		sf := t.lru.prev
		t.unlinkLocked(sf)
		t.closeLocked(sf)
	}
}

func (t *fileTable) unlinkLocked(sf *segFile) {
	if sf.prev != nil {
		sf.prev.next, sf.next.prev = sf.next, sf.prev
		sf.prev, sf.next = nil, nil
	}
}

func (t *fileTable) closeLocked(sf *segFile) {
	if sf.f != nil {
		sf.f.Close()
		sf.f = nil
		t.open--
	}
}

// closeAll closes every unreferenced file (Close of the engine).
func (t *fileTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.lru.prev != &t.lru {
		sf := t.lru.prev
		t.unlinkLocked(sf)
		t.closeLocked(sf)
	}
}

// batchHeader is what a walk over a segment reads of each batch.
type batchHeader struct {
	base, last int64
	size       int64 // the whole batch: 12 + its length field
	maxTs      int64
	epoch      int32
	attrs      int16
	pid        int64
}

// headerReader reads batch headers of a segment through a small buffer,
// so that a walk over small batches costs one read per few kilobytes.
type headerReader struct {
	f    vfs.File
	end  int64 // readable bytes of the file
	buf  *[64 << 10]byte
	at   int64 // buf holds the file's bytes [at, at+n)
	n    int64
	last int64 // size of the last batch read
}

var headerBufs = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// release returns the reader's buffer (reads may follow; they take
// another).
func (r *headerReader) release() {
	if r.buf != nil {
		headerBufs.Put(r.buf)
		r.buf, r.n = nil, 0
	}
}

var errTorn = errors.New("torn or corrupt batch")

// header reads the header of the batch at pos. It fails with errTorn when
// the header is not that of a whole batch ending by end, and with io.EOF
// when pos is end.
func (r *headerReader) header(pos int64) (batchHeader, error) {
	if pos >= r.end {
		return batchHeader{}, io.EOF
	}
	if pos+headerPeek > r.end {
		return batchHeader{}, errTorn
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
		n, err := r.f.ReadAt(r.buf[:min(size, r.end-pos)], pos)
		if n < headerPeek {
			if err == nil || err == io.EOF {
				err = errTorn
			}
			return batchHeader{}, err
		}
		r.at, r.n = pos, int64(n)
	}
	h := batch(r.buf[pos-r.at : pos-r.at+headerPeek])
	length := int64(int32(binary.BigEndian.Uint32(h[offBatchLength:])))
	if length < batchHeaderLen-12 || length > maxBatchSize || pos+12+length > r.end || h[offMagic] != 2 || h.lastOffsetDelta() < 0 || h.baseOffset() < 0 {
		return batchHeader{}, errTorn
	}
	r.last = 12 + length
	return batchHeader{base: h.baseOffset(), last: h.lastOffset(), size: 12 + length, maxTs: h.maxTimestamp(), epoch: h.leaderEpoch(),
		attrs: h.attributes(), pid: h.producerID()}, nil
}

// readBatch reads and checks the whole batch at pos (recovery).
func readBatch(f vfs.File, pos int64, h batchHeader, buf []byte) (batch, error) {
	if int64(cap(buf)) < h.size {
		buf = make([]byte, h.size)
	}
	buf = buf[:h.size]
	if _, err := f.ReadAt(buf, pos); err != nil {
		return nil, errTorn
	}
	bs, err := splitBatches(buf)
	if err != nil || len(bs) != 1 {
		return nil, errTorn
	}
	return bs[0], nil
}

// listSegments returns the bases of the segment files in dir, sorted, and
// removes what an interrupted compaction or truncation left behind.
func listSegments(fs vfs.FS, dir string) ([]int64, error) {
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
		} else if strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, tmpSuffix) {
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
				return nil, fmt.Errorf("remove %s: %w", n, err)
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// truncateFile cuts the file at size and syncs it. Files on disk are cut
// in place; others (the in-memory filesystem of tests, which has no
// truncation) are rewritten and renamed, so replaced is true and the
// caller must reopen the file.
func truncateFile(fs vfs.FS, f vfs.File, path string, size int64) (replaced bool, err error) {
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
	tmp := path + tmpSuffix
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
		err = syncDir(fs, fs.PathDir(path))
	}
	if err != nil {
		return false, fmt.Errorf("truncate %s: %w", path, err)
	}
	return true, nil
}

// syncDir makes the directory's entries (created, renamed or removed
// files) durable.
// dirSyncs makes a directory's new entries durable once for many
// changes: each change takes a generation, and a sync covers every
// generation taken before it started, so that the partitions created
// between two sync rounds cost the segments' directory one fsync.
type dirSyncs struct {
	dir    string
	gen    atomic.Int64 // the last generation taken
	synced atomic.Int64 // the last generation known durable
	mu     sync.Mutex   // one sync at a time; the others wait and see it
}

// changed is called after a change to the directory and returns its
// generation.
func (d *dirSyncs) changed() int64 { return d.gen.Add(1) }

// sync returns once the change of generation gen is durable.
func (d *dirSyncs) sync(fs vfs.FS, gen int64) error {
	if d.synced.Load() >= gen {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.synced.Load() >= gen {
		return nil
	}
	covers := d.gen.Load()
	if err := syncDir(fs, d.dir); err != nil {
		return err
	}
	d.synced.Store(covers)
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
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
