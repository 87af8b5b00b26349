package journal

import (
	"strconv"
	"strings"
)

// SegmentID numbers a journal segment: segment N lives in db-<N>.log.
// Segments are numbered from 1 and consecutively.
type SegmentID uint32

// String returns the segment's file name, e.g. "db-7.log".
func (s SegmentID) String() string {
	return segmentPrefix + strconv.FormatUint(uint64(s), 10) + segmentSuffix
}

// ParseSegmentName returns the SegmentID of a segment's file name
// (db-<N>.log, N canonical decimal, at least 1), and whether name is one.
func ParseSegmentName(name string) (SegmentID, bool) { return parseSegmentName(name) }

// parseSegmentName returns the SegmentID of a file named db-<N>.log, with N
// in canonical decimal form (no sign, no leading zero) and at least 1.
func parseSegmentName(name string) (SegmentID, bool) {
	if !strings.HasPrefix(name, segmentPrefix) || !strings.HasSuffix(name, segmentSuffix) {
		return 0, false
	}
	num := name[len(segmentPrefix) : len(name)-len(segmentSuffix)]
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || n == 0 || SegmentID(n).String() != name {
		return 0, false
	}
	return SegmentID(n), true
}

// Location names a record: the segment and the byte offset of its frame.
// Locations are comparable and ordered by (Segment, Offset). The zero
// Location sorts before every record.
type Location struct {
	Segment SegmentID
	Offset  int64
}

// String returns e.g. "db-7.log@4096".
func (l Location) String() string {
	return l.Segment.String() + "@" + strconv.FormatInt(l.Offset, 10)
}

// Less reports whether l comes before o in the journal.
func (l Location) Less(o Location) bool {
	if l.Segment != o.Segment {
		return l.Segment < o.Segment
	}
	return l.Offset < o.Offset
}

// IsZero reports whether l is the zero Location.
func (l Location) IsZero() bool { return l == Location{} }

// SegmentInfo describes one segment.
type SegmentInfo struct {
	ID SegmentID
	// Size is the file's size in bytes: preallocated a step (1 MiB) ahead of
	// its records, up to SegmentSize.
	Size int64
	// First is the location of the segment's first record, or End if the
	// segment holds none.
	First Location
	// Last is the location of the segment's last acknowledged record (user
	// or internal), or the zero Location if it holds none.
	Last Location
	// End is the offset just past the segment's last acknowledged frame.
	End Location
	// Sealed reports whether the segment ends with a seal record (every
	// segment except the active one).
	Sealed bool
	// Verified reports whether the segment's records were verified (by
	// Open, or later by Iterate or Verify; see Options.VerifyFrom). For a
	// segment not verified yet First, Last and End are zero and Sealed is
	// true (it is not the last segment).
	Verified bool
}
