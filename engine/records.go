package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"io"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Records is the result of FetchRecords: whole record batches, left in
// their segment files until written. Each segment read contributes one
// contiguous byte range; the files stay open (even if retention deletes
// them meanwhile) until Close.
type Records struct {
	e      *Engine
	chunks []chunk
	n      int64
}

type chunk struct {
	sf  *segfile.File
	f   vfs.File
	off int64
	n   int64
}

// Len is the number of bytes of the batches.
func (r *Records) Len() int {
	if r == nil {
		return 0
	}
	return int(r.n)
}

// Close releases the files. It may be called more than once.
func (r *Records) Close() {
	if r == nil {
		return
	}
	for _, c := range r.chunks {
		r.e.files.Release(c.sf)
	}
	r.chunks, r.n = nil, 0
}

// WriteTo writes the batches to w: from the file to the socket without a
// copy through user space (sendfile) when w is a plain TCP connection and
// the file is on disk, through a buffer otherwise. A file cut shorter
// since the read (a truncation) fails the write with
// io.ErrUnexpectedEOF: the caller must close the connection, as the frame
// announced more bytes.
func (r *Records) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, c := range r.chunks {
		n, handled, err := segfile.SendFile(w, c.f, c.off, c.n)
		if !handled {
			n, err = io.Copy(w, io.NewSectionReader(c.f, c.off, c.n))
			if err == nil && n < c.n {
				err = io.ErrUnexpectedEOF
			}
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// AppendTo reads the batches into dst.
func (r *Records) AppendTo(dst []byte) ([]byte, error) {
	if r == nil {
		return dst, nil
	}
	for _, c := range r.chunks {
		start := len(dst)
		dst = append(dst, make([]byte, c.n)...)
		if _, err := c.f.ReadAt(dst[start:], c.off); err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}

func (r *Records) add(sf *segfile.File, f vfs.File, off, n int64) {
	if n == 0 {
		r.e.files.Release(sf)
		return
	}
	r.chunks = append(r.chunks, chunk{sf, f, off, n})
	r.n += n
}

// Fetch reads batches from offset: at least one whole batch (even larger
// than maxBytes), then more while the total stays within maxBytes, never
// past the high watermark (the last stable offset for read_committed).
// The batches are copies; see FetchRecords for a read without copies.
func (p *Partition) Fetch(offset int64, maxBytes int, iso Isolation) (FetchResult, error) {
	res, recs, err := p.FetchRecords(offset, maxBytes, iso)
	if recs == nil {
		return res, err
	}
	buf, rerr := recs.AppendTo(make([]byte, 0, recs.Len()))
	recs.Close()
	for len(buf) >= 12 {
		n := 12 + int(binary.BigEndian.Uint32(buf[recordbatch.OffBatchLength:]))
		res.Batches = append(res.Batches, buf[:n:n])
		buf = buf[n:]
	}
	if err == nil && rerr != nil {
		err = fmt.Errorf("%s-%d: fetch: %w", p.topic, p.part, rerr)
	}
	return res, err
}

// FetchRecords is Fetch without copies: the batches stay in their files
// and go to the client with Records.WriteTo. The caller must Close the
// Records (nil when there is nothing to read).
func (p *Partition) FetchRecords(offset int64, maxBytes int, iso Isolation) (FetchResult, *Records, error) {
	for attempt := 0; ; attempt++ {
		res, recs, gen, err := p.read(offset, maxBytes, iso)
		if err != nil || recs == nil {
			return res, nil, err
		}
		p.mu.Lock()
		same := p.gen == gen
		p.mu.Unlock()
		// A truncation or compaction may have changed the files under the
		// read: read again, which is rare enough to be cheap.
		if same || attempt == 2 {
			return res, recs, nil
		}
		recs.Close()
	}
}

func (p *Partition) read(offset int64, maxBytes int, iso Isolation) (res FetchResult, recs *Records, gen uint64, err error) {
	r := logRead{p: p, offset: offset, maxBytes: maxBytes, lastOff: -1}
	res, aborted, more, err := r.start(iso)
	gen = r.gen
	if err != nil || !more {
		return res, nil, gen, err
	}
	recs = &Records{e: p.e}
	defer func() {
		if err != nil || recs.n == 0 {
			recs.Close()
			recs = nil
		}
	}()
	if r.pos < 0 && offset <= r.seg.base {
		r.pos = 0 // the segment's first batch (a consumer from the start)
	}
	if r.pos < 0 {
		if r.pos, err = p.indexLookup(r.seg.base, offset); err != nil {
			p.e.files.Release(r.sf)
			return res, recs, gen, err
		}
	}
	err = r.segments(recs)
	if r.lastOff >= 0 {
		p.mu.Lock()
		if p.gen == gen {
			p.setCursorLocked(cursor{offset: r.lastOff + 1, seg: r.seg.base, pos: r.pos, gen: gen})
		}
		p.mu.Unlock()
		if iso == ReadCommitted {
			// The aborted transactions overlapping what is returned.
			for _, a := range aborted[sort.Search(len(aborted), func(i int) bool { return aborted[i].Last >= offset }):] {
				if a.First <= r.lastOff {
					res.AbortedTxns = append(res.AbortedTxns, AbortedTxn{ProducerID: a.PID, FirstOffset: a.First})
				}
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("%s-%d: fetch: %w", p.topic, p.part, err)
	}
	return res, recs, gen, err
}

// logRead is one read of a partition's log from offset (Partition.read):
// the segment it is in and where.
type logRead struct {
	p        *Partition
	offset   int64
	maxBytes int
	upper    int64  // where it stops: the high watermark, last stable offset or log end
	gen      uint64 // the partition's generation when it started
	// i is the index of seg, whose file sf is open as f, with end bytes
	// of whole batches; pos is the position in it (-1: unknown yet).
	i       int
	seg     *segment
	sf      *segfile.File
	f       vfs.File
	end     int64
	pos     int64
	lastOff int64 // the last offset read, -1 if none
}

// start looks at the partition under its lock: the result's offsets, the
// aborted transactions, and whether there is anything to read (more),
// in which case it opens the segment holding r.offset, and takes the
// position of the read that ended there if there was one.
func (r *logRead) start(iso Isolation) (res FetchResult, aborted []abortedTxn, more bool, err error) {
	p, offset := r.p, r.offset
	p.mu.Lock()
	defer p.mu.Unlock()
	res = FetchResult{HighWatermark: p.hwm, LastStableOffset: p.lastStableLocked(), LogStartOffset: p.logStart}
	r.gen = p.gen
	if p.deleted {
		return res, nil, false, fmt.Errorf("%s-%d: partition deleted: %w", p.topic, p.part, kerr.UnknownTopicOrPartition)
	}
	if offset < p.logStart || offset > p.leo {
		return res, nil, false, fmt.Errorf("%s-%d: fetch offset %d outside [%d, %d]: %w", p.topic, p.part, offset, p.logStart, p.leo, kerr.OffsetOutOfRange)
	}
	r.upper = res.HighWatermark
	switch iso {
	case ReadCommitted:
		r.upper = res.LastStableOffset
	case ReadLogEnd: // a follower (replica.go)
		r.upper = p.leo
	}
	if offset >= r.upper || len(p.segs) == 0 {
		return res, nil, false, nil
	}
	aborted = p.aborted
	r.i = max(sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > offset })-1, 0)
	r.pos = -1
	if c, ok := p.cursorLocked(offset); ok && c.seg == p.segs[r.i].base {
		r.pos = c.pos
	}
	if r.seg, r.sf, r.f, r.end, err = p.openSegLocked(r.i); err != nil {
		return res, nil, false, err
	}
	return res, aborted, true, nil
}

// segments reads from r.pos to r.upper or maxBytes into recs, segment
// after segment while the partition's segments are those the read
// started with.
func (r *logRead) segments(recs *Records) (err error) {
	p, offset := r.p, r.offset
	total := int64(0)
	for {
		hr := segfile.HeaderReader{F: r.f, End: r.end}
		// Skip to the batch holding offset (or the first after it: a
		// compacted gap, or the start of the next segment).
		var h segfile.Header
		for {
			if h, err = hr.Header(r.pos); err != nil || h.Last >= offset {
				break
			}
			r.pos += h.Size
		}
		start := r.pos
		full := false
		for err == nil {
			if h.Base >= r.upper || total > 0 && total+h.Size > int64(r.maxBytes) {
				full = true
				break
			}
			total += h.Size
			r.lastOff = h.Last
			r.pos += h.Size
			h, err = hr.Header(r.pos)
		}
		hr.Release()
		recs.add(r.sf, r.f, start, r.pos-start)
		if err != nil && err != io.EOF {
			// A batch being cut by a truncation under the read: what was
			// read before it is good.
			p.e.log.Warn("fetch: unreadable batch", "topic", p.topic, "partition", p.part, "segment", r.seg.base, "position", r.pos, "err", err)
			return nil
		}
		if full {
			return nil
		}
		// The end of this segment: on to the next one.
		p.mu.Lock()
		if p.gen != r.gen || r.i+1 >= len(p.segs) || p.segs[r.i] != r.seg {
			p.mu.Unlock()
			return nil
		}
		r.i++
		r.seg, r.sf, r.f, r.end, err = p.openSegLocked(r.i)
		p.mu.Unlock()
		if err != nil {
			return err
		}
		r.pos = 0
	}
}

// openSegLocked references segment i's file and returns it with the
// number of its bytes that are whole batches.
func (p *Partition) openSegLocked(i int) (*segment, *segfile.File, vfs.File, int64, error) {
	seg := p.segs[i]
	f, err := p.e.files.Acquire(seg.file)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%s-%d: fetch: %w", p.topic, p.part, err)
	}
	return seg, seg.file, f, seg.size, nil
}

// indexLookup returns the position in segment base of the last indexed
// batch at or below offset (0 when there is none).
func (p *Partition) indexLookup(base, offset int64) (int64, error) {
	p.e.closeMu.RLock()
	defer p.e.closeMu.RUnlock()
	if p.e.closed {
		return 0, errClosed
	}
	it, err := p.e.db.NewIter(&pebble.IterOptions{LowerBound: keys.Index(p.id, p.part, base), UpperBound: keys.Index(p.id, p.part, offset+1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	if v := it.Value(); len(v) == 16 {
		return be64(v), nil
	}
	return 0, errors.New("malformed index entry")
}

func (p *Partition) cursorLocked(offset int64) (cursor, bool) {
	for _, c := range p.cursors {
		if c.offset == offset && c.gen == p.gen {
			return c, true
		}
	}
	return cursor{}, false
}

func (p *Partition) setCursorLocked(c cursor) {
	for i := range p.cursors {
		if p.cursors[i].offset == c.offset && p.cursors[i].gen == c.gen {
			p.cursors[i] = c
			return
		}
	}
	p.cursors[p.nextCursor] = c
	p.nextCursor = (p.nextCursor + 1) % len(p.cursors)
}
