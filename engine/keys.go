package engine

import "encoding/binary"

// formatVersion is the data-dir format this engine writes: 1 kept record
// batches in Pebble, 2 keeps them in segment files. The key layout is
// engine/internal/keys.
const formatVersion = 2

func be64(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }
