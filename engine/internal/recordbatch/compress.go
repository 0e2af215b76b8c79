package recordbatch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Compression codecs of the batch attributes.
const (
	CodecNone   = 0
	CodecGzip   = 1
	CodecSnappy = 2
	CodecLZ4    = 3
	CodecZstd   = 4
)

// Decoders are pooled: a zstd or gzip decoder is costly to build and
// compressed produce is the common case.
var (
	gzipPool  sync.Pool // *gzip.Reader
	lz4Pool   = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	zstdPool  = sync.Pool{New: func() any { return newZstdDecoder() }}
	bufioPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}
	zstdEnc   = sync.Pool{New: func() any {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		return e
	}}
)

func newZstdDecoder() *zstd.Decoder {
	// The window cap bounds the memory a hostile frame without a content
	// size can make the decoder reserve: 8 MiB covers producers up to zstd
	// level 19 (the default level 3 uses 2 MiB).
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		panic(err) // only bad options make NewReader fail
	}
	return d
}

var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

var errTooLarge = fmt.Errorf("decompressed records exceed the limit: %w", kerr.MessageTooLarge)

// A batch is bounded as Apache Kafka bounds it, by its stored (compressed)
// size against max.message.bytes: a 3 MiB record that compresses to 3 KiB
// is accepted. What it inflates to is bounded by a fixed ceiling instead,
// the defence against decompression bombs: validating a batch streams its
// records, so the ceiling bounds the work a batch costs, not memory. It is
// compaction's own limit, so that every batch accepted can be compacted.
const MaxDecompressed = 64 << 20

// maxStreamedKey bounds a record key read from a decompression stream,
// the one field validation keeps in memory: larger keys are refused, so
// that a small batch cannot make the broker allocate the ceiling.
const maxStreamedKey = 1 << 20

var errKeyTooLarge = fmt.Errorf("a record key in a compressed batch exceeds %d bytes: %w", maxStreamedKey, kerr.MessageTooLarge)

// decompressor opens a streaming reader over a compressed records payload.
// close must be called to return pooled state.
func decompressor(codec int8, in []byte, limit int) (r io.Reader, close func(), err error) {
	src := bytes.NewReader(in)
	switch codec {
	case CodecGzip:
		zr, _ := gzipPool.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		if err := zr.Reset(src); err != nil {
			gzipPool.Put(zr)
			return nil, nil, Corrupt("gzip header: %v", err)
		}
		return zr, func() { gzipPool.Put(zr) }, nil
	case CodecSnappy:
		out, err := snappyDecode(nil, in, limit)
		if err != nil {
			return nil, nil, err
		}
		return bytes.NewReader(out), func() {}, nil
	case CodecLZ4:
		lr := lz4Pool.Get().(*lz4.Reader)
		lr.Reset(src)
		return lr, func() { lr.Reset(nil); lz4Pool.Put(lr) }, nil
	case CodecZstd:
		// A frame that declares its size is checked before the decoder
		// reserves anything for it.
		var h zstd.Header
		if err := h.Decode(in); err == nil && h.HasFCS && h.FrameContentSize > uint64(limit) {
			return nil, nil, errTooLarge
		}
		d := zstdPool.Get().(*zstd.Decoder)
		if err := d.Reset(src); err != nil {
			zstdPool.Put(d)
			return nil, nil, Corrupt("zstd: %v", err)
		}
		return d, func() { d.Reset(nil); zstdPool.Put(d) }, nil
	}
	return nil, nil, Corrupt("unknown compression codec %d", codec)
}

// snappyDecode decodes Kafka's snappy payloads: a raw snappy block (franz-go,
// sarama, librdkafka) or xerial framing (the Java client). Each block's
// decoded length is checked against limit before anything is allocated.
func snappyDecode(dst, in []byte, limit int) ([]byte, error) {
	block := func(b []byte) error {
		n, err := snappy.DecodedLen(b)
		if err != nil {
			return Corrupt("snappy: %v", err)
		}
		if n > limit-len(dst) {
			return errTooLarge
		}
		dst = grow(dst, n)
		if _, err := snappy.Decode(dst[len(dst)-n:], b); err != nil {
			return Corrupt("snappy: %v", err)
		}
		return nil
	}
	if !bytes.HasPrefix(in, xerialHeader) {
		return dst, block(in)
	}
	if len(in) < 16 {
		return nil, Corrupt("xerial snappy header truncated")
	}
	for in = in[16:]; len(in) > 0; {
		if len(in) < 4 {
			return nil, Corrupt("xerial snappy chunk truncated")
		}
		n := int(uint32(in[0])<<24 | uint32(in[1])<<16 | uint32(in[2])<<8 | uint32(in[3]))
		if n > len(in)-4 {
			return nil, Corrupt("xerial snappy chunk of %d bytes, %d left", n, len(in)-4)
		}
		if err := block(in[4 : 4+n]); err != nil {
			return nil, err
		}
		in = in[4+n:]
	}
	return dst, nil
}

// grow extends b by n bytes, reallocating only when needed.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*len(b)+n)
	copy(nb, b)
	return nb
}

// limitedReader fails with errTooLarge once more than n bytes were read.
type limitedReader struct {
	r io.Reader
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	if len(p) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= n
	if l.n < 0 {
		return n, errTooLarge
	}
	return n, err
}

// streamSource reads records from a bounded decompression stream.
type streamSource struct {
	br    *bufio.Reader
	n     int
	limit int
	buf   []byte
}

func (s *streamSource) ReadByte() (byte, error) {
	c, err := s.br.ReadByte()
	if err != nil {
		return 0, streamErr(err)
	}
	s.n++
	return c, nil
}

func (s *streamSource) next(n int, keep bool) ([]byte, error) {
	if n < 0 || n > s.limit-s.n {
		return nil, errTooLarge // never allocate from a length the input claims
	}
	if !keep {
		d, err := s.br.Discard(n)
		s.n += d
		return nil, streamErr(err)
	}
	if n > maxStreamedKey {
		return nil, errKeyTooLarge
	}
	// Grown as the bytes really come out of the decoder.
	s.buf = s.buf[:0]
	for len(s.buf) < n {
		m := min(n-len(s.buf), 64<<10)
		s.buf = grow(s.buf, m)
		got, err := io.ReadFull(s.br, s.buf[len(s.buf)-m:])
		s.n += got
		if err != nil {
			return nil, streamErr(err)
		}
	}
	return s.buf, nil
}

func (s *streamSource) pos() int       { return s.n }
func (s *streamSource) raw(int) []byte { return nil }
func (s *streamSource) atEOF() bool    { _, err := s.br.Peek(1); return err == io.EOF }
func streamErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge):
		return err
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return errShort
	}
	return Corrupt("decompressing: %v", err)
}

// Walk walks the records of b, decompressing them through a bounded
// stream if needed; limit bounds the decompressed size.
func Walk(b Batch, limit int, fn func(*Record) error) error {
	if b.Codec() == CodecNone {
		return WalkRecords(&SliceSource{B: b.Records()}, b.RecordCount(), fn)
	}
	r, done, err := decompressor(b.Codec(), b.Records(), limit)
	if err != nil {
		return err
	}
	defer done()
	br := bufioPool.Get().(*bufio.Reader)
	br.Reset(&limitedReader{r: r, n: limit})
	defer func() { br.Reset(nil); bufioPool.Put(br) }()
	src := &streamSource{br: br, limit: limit}
	if err := WalkRecords(src, b.RecordCount(), fn); err != nil {
		return err
	}
	return nil
}

// DecompressAll inflates b's records into dst (reused), at most limit bytes.
func DecompressAll(dst []byte, b Batch, limit int) ([]byte, error) {
	if b.Codec() == CodecNone {
		return append(dst[:0], b.Records()...), nil
	}
	if b.Codec() == CodecSnappy {
		return snappyDecode(dst[:0], b.Records(), limit)
	}
	r, done, err := decompressor(b.Codec(), b.Records(), limit)
	if err != nil {
		return nil, err
	}
	defer done()
	buf := bytes.NewBuffer(dst[:0])
	if _, err := buf.ReadFrom(&limitedReader{r: r, n: limit}); err != nil {
		return nil, streamErr(err)
	}
	return buf.Bytes(), nil
}

// Compress encodes records with codec (used when compaction rewrites a
// batch; client batches are never re-encoded).
func Compress(codec int8, records []byte) ([]byte, error) {
	var buf bytes.Buffer
	switch codec {
	case CodecNone:
		return records, nil
	case CodecGzip:
		w := gzip.NewWriter(&buf)
		if _, err := w.Write(records); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	case CodecSnappy:
		// Xerial framing: every client library reads it.
		buf.Write(xerialHeader)
		buf.Write([]byte{0, 0, 0, 1, 0, 0, 0, 1})
		for len(records) > 0 {
			n := min(len(records), 32<<10)
			enc := snappy.Encode(nil, records[:n])
			buf.Write([]byte{byte(len(enc) >> 24), byte(len(enc) >> 16), byte(len(enc) >> 8), byte(len(enc))})
			buf.Write(enc)
			records = records[n:]
		}
	case CodecLZ4:
		w := lz4.NewWriter(&buf)
		if _, err := w.Write(records); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	case CodecZstd:
		e := zstdEnc.Get().(*zstd.Encoder)
		defer zstdEnc.Put(e)
		return e.EncodeAll(records, nil), nil
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	return buf.Bytes(), nil
}

// StreamOverhead is what a streaming decoder holds besides its window: the
// 32 KiB bufio.Reader that validation reads through, and its own tables.
const StreamOverhead = 64 << 10

// DecodeMemory is the most that validating records (a Produce's record
// batches, as AppendRequest.Records) allocates at once to decompress
// them, read from the batches' headers alone: a raw snappy block is
// decoded whole (its declared length), xerial snappy chunk by chunk into
// one buffer (the sum), zstd keeps its window (at most 8 MiB), lz4 two
// blocks of the frame's block size, gzip its 32 KiB window. Batches are
// validated one after the other, so it is the largest batch's need. The
// broker counts it against queued.max.request.bytes before appending.
func DecodeMemory(records []byte) int64 {
	var most int64
	for len(records) >= HeaderLen {
		n := int64(int32(binary.BigEndian.Uint32(records[OffBatchLength:]))) + 12
		if n < HeaderLen || n > int64(len(records)) {
			break // Split refuses it before anything is decoded
		}
		b := Batch(records[:n])
		most = max(most, decodeMemory(b.Codec(), b.Records()))
		records = records[n:]
	}
	return most
}

func decodeMemory(codec int8, in []byte) int64 {
	switch codec {
	case CodecSnappy:
		var total int64
		block := func(b []byte) {
			if n, err := snappy.DecodedLen(b); err == nil {
				total += int64(n)
			}
		}
		if !bytes.HasPrefix(in, xerialHeader) {
			block(in)
		} else if len(in) >= 16 {
			for in = in[16:]; len(in) >= 4; {
				n := int(binary.BigEndian.Uint32(in))
				if n > len(in)-4 {
					break
				}
				block(in[4 : 4+n])
				in = in[4+n:]
			}
		}
		return min(total, MaxDecompressed)
	case CodecZstd:
		window := int64(8 << 20)
		var h zstd.Header
		if err := h.Decode(in); err == nil {
			if h.WindowSize > 0 {
				window = min(window, int64(h.WindowSize))
			}
			if h.HasFCS {
				window = min(window, int64(h.FrameContentSize))
			}
		}
		return window + StreamOverhead
	case CodecLZ4:
		// Frame: magic (4 bytes), FLG, BD; BD's bits 4-6 give the block
		// maximum size, 64 KiB (4) to 4 MiB (7).
		size := int64(4 << 20)
		if len(in) >= 6 && binary.LittleEndian.Uint32(in) == 0x184D2204 {
			if id := (in[5] >> 4) & 7; id >= 4 {
				size = 1 << (8 + 2*int64(id))
			}
		}
		return 2*size + StreamOverhead
	case CodecGzip:
		return 32<<10 + StreamOverhead
	}
	return 0
}
