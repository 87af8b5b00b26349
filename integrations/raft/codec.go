package raftkdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCorrupt reports a stored value that does not decode: a log entry of an
// unknown version, with lengths that do not fit, a checksum mismatch or an
// index other than the key it is stored under, or a stable value without
// its version byte, or a log entry kdb reports damaged (the error wraps
// kdb.ErrCorrupt too). The message says which and where.
var ErrCorrupt = errors.New("raftkdb: corrupt value")

// logVersion is the only version of the entry encoding (see doc.go, FORMAT).
const logVersion = 1

const (
	flagAppendedAt = 1 << 0 // AppendedAt is not the zero time: 12 bytes follow the header
	flagData       = 1 << 1 // Data is not nil (it may be empty)
	flagExtensions = 1 << 2 // Extensions is not nil
	flagsKnown     = flagAppendedAt | flagData | flagExtensions
)

// headerSize: version, type, flags, index, term.
const headerSize = 1 + 1 + 1 + 8 + 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodedSize returns the length of appendLog's output for l.
func encodedSize(l *raft.Log) int {
	n := headerSize + 4
	if !l.AppendedAt.IsZero() {
		n += 12
	}
	n += uvarintLen(uint64(len(l.Data))) + len(l.Data)
	n += uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions)
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// appendLog appends the encoding of l to dst.
func appendLog(dst []byte, l *raft.Log) []byte {
	start := len(dst)
	var flags byte
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	if l.Data != nil {
		flags |= flagData
	}
	if l.Extensions != nil {
		flags |= flagExtensions
	}
	dst = append(dst, logVersion, byte(l.Type), flags)
	dst = binary.BigEndian.AppendUint64(dst, l.Index)
	dst = binary.BigEndian.AppendUint64(dst, l.Term)
	if flags&flagAppendedAt != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(l.AppendedAt.Unix()))
		dst = binary.BigEndian.AppendUint32(dst, uint32(l.AppendedAt.Nanosecond()))
	}
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodeLog decodes b (as stored under index want) into l. Data and
// Extensions alias b: the caller hands over a buffer of its own.
func decodeLog(b []byte, want uint64, l *raft.Log) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: index %d (%d bytes): %s", ErrCorrupt, want, len(b), fmt.Sprintf(format, args...))
	}
	if len(b) < headerSize+4 {
		return bad("shorter than the %d-byte minimum", headerSize+4)
	}
	if b[0] != logVersion {
		return bad("unknown encoding version %d (this build reads version %d)", b[0], logVersion)
	}
	body := b[:len(b)-4]
	if got, sum := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(b[len(b)-4:]); got != sum {
		return bad("checksum %08x, stored %08x", got, sum)
	}
	flags := b[2]
	if flags&^flagsKnown != 0 {
		return bad("unknown flags %#x", flags)
	}
	idx := binary.BigEndian.Uint64(b[3:])
	if idx != want {
		return bad("the entry says index %d", idx)
	}
	out := raft.Log{Index: idx, Term: binary.BigEndian.Uint64(b[11:]), Type: raft.LogType(b[1])}
	p := body[headerSize:]
	if flags&flagAppendedAt != 0 {
		if len(p) < 12 {
			return bad("truncated AppendedAt")
		}
		sec, nsec := int64(binary.BigEndian.Uint64(p)), binary.BigEndian.Uint32(p[8:])
		if nsec >= 1e9 {
			return bad("AppendedAt nanoseconds %d out of range", nsec)
		}
		out.AppendedAt = time.Unix(sec, int64(nsec))
		if out.AppendedAt.IsZero() {
			return bad("AppendedAt flagged but the zero time")
		}
		p = p[12:]
	}
	var err error
	if out.Data, p, err = field(p, flags&flagData != 0); err != nil {
		return bad("Data: %v", err)
	}
	if out.Extensions, p, err = field(p, flags&flagExtensions != 0); err != nil {
		return bad("Extensions: %v", err)
	}
	if len(p) != 0 {
		return bad("%d bytes after the last field", len(p))
	}
	*l = out
	return nil
}

// field reads one length-prefixed byte string; present says whether it was
// non-nil when encoded.
func field(p []byte, present bool) (v, rest []byte, err error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || k != uvarintLen(n) {
		return nil, nil, errors.New("bad length")
	}
	p = p[k:]
	if n > uint64(len(p)) {
		return nil, nil, fmt.Errorf("length %d past the end (%d bytes left)", n, len(p))
	}
	if !present {
		if n != 0 {
			return nil, nil, fmt.Errorf("length %d for an absent field", n)
		}
		return nil, p, nil
	}
	return p[:n:n], p[n:], nil
}
