// Package uuid holds Kafka's UUID, the one type for topic IDs that the
// engine (engine.TopicID), the metadata (raftmeta/metadata's UUID) and the
// plugins share, so that an ID passes between them without conversion.
package uuid

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// UUID is a Kafka UUID: 16 bytes, as kmsg carries topic IDs. Its text
// form (String, JSON) is hex; Base64 is the form Kafka prints.
type UUID [16]byte

func (u UUID) String() string { return hex.EncodeToString(u[:]) }

// IsZero reports whether u is the all-zero UUID, which Kafka uses to mean
// "no topic ID".
func (u UUID) IsZero() bool { return u == UUID{} }

// Base64 is the form Kafka prints topic IDs and cluster IDs in.
func (u UUID) Base64() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// MarshalText renders u as hex, so that JSON images and records stay readable.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText parses the hex form written by MarshalText.
func (u *UUID) UnmarshalText(b []byte) error {
	if len(b) != 32 {
		return fmt.Errorf("bad UUID %q", b)
	}
	_, err := hex.Decode(u[:], b)
	return err
}

// Random returns a random (version 4) UUID the way Kafka's
// Uuid.randomUuid does: never zero and never starting with '-' in base64,
// which would confuse command-line tools.
func Random() UUID {
	for {
		var u UUID
		rand.Read(u[:]) // never fails (crypto/rand since Go 1.24)
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		if !u.IsZero() && u.Base64()[0] != '-' {
			return u
		}
	}
}
