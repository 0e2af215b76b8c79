package engine

// Size returns the bytes of the partition's segment files: its share of
// the data dir (DescribeLogDirs), without what it keeps in Pebble.
func (p *Partition) Size() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, seg := range p.segs {
		n += seg.size
	}
	return n
}

// Disk returns the total and available bytes of the data dir's
// filesystem; ok is false where the filesystem has no such figures (an
// in-memory one).
func (e *Engine) Disk() (total, avail int64, ok bool) { return e.space.Disk() }
