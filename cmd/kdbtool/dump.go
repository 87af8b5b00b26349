package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

func init() {
	register("dump", command{
		summary: "list the keys of an index or the messages of a destination (read-only)",
		run:     runDump,
	})
}

// The JSON document of a dump (README, "dump DIR") has every field it
// lists, whatever the listing holds: no omitempty on them. A value or body
// is given exactly: as text in value (body) when it is valid UTF-8, else
// null, and always in hex in value_hex (body_hex); without --values all
// four are null.
type dumpKey struct {
	Key       string  `json:"key"` // the key if it is valid UTF-8, else ""
	KeyHex    string  `json:"key_hex"`
	ValueSize int     `json:"value_size"`
	Value     *string `json:"value"`     // --values: the value if it is valid UTF-8, else null
	ValueHex  *string `json:"value_hex"` // --values: the value in hex
	value     []byte  // --values: the value, for the human output
}

// A message's ID, producer ID and properties are any bytes (the broker
// takes Go strings): JSON would turn bytes that are not UTF-8 into U+FFFD,
// so they are also given exactly, in hex (id_hex, producer_id_hex, and
// properties_hex when a property is not valid UTF-8).
type dumpMsg struct {
	Seq           uint64            `json:"seq"`
	ID            string            `json:"id"` // the ID if it is valid UTF-8, else ""
	IDHex         string            `json:"id_hex"`
	ProducerID    string            `json:"producer_id"` // if valid UTF-8, else ""
	ProducerIDHex string            `json:"producer_id_hex"`
	ProducerSeq   uint64            `json:"producer_seq"`
	Properties    map[string]string `json:"properties"` // {} when it has none; the pairs valid UTF-8
	// PropertiesHex: every property, key and value in hex, when one of
	// them is not valid UTF-8 (and so missing from Properties); else null.
	PropertiesHex map[string]string `json:"properties_hex"`
	BodySize      int               `json:"body_size"`
	Body          *string           `json:"body"`     // --values: the body if it is valid UTF-8, else null
	BodyHex       *string           `json:"body_hex"` // --values: the body in hex
	body          []byte            // --values: the body, for the human output
	msg           *broker.Message   // the message (its Body nil), for the human output
}

type dumpOut struct {
	Index    string
	NS       string
	Queue    string
	Topic    string
	Sub      string
	Keys     []dumpKey
	Messages []dumpMsg
	// Next is where a following dump with --start would go on ("" or 0
	// when the end was reached).
	Next    string
	NextSeq uint64
	nextKey []byte // the key Next names, for the human output
}

// dumpIndexJSON and dumpDestJSON are the JSON documents of a dump of an
// index and of a destination.
type dumpIndexJSON struct {
	Index   string    `json:"index"`
	NS      string    `json:"namespace,omitempty"`
	Keys    []dumpKey `json:"keys"`
	Next    string    `json:"next"`     // the next key if it is valid UTF-8, else its hex; "" at the end
	NextHex string    `json:"next_hex"` // the next key in hex (for --hex --start); "" at the end
}

type dumpDestJSON struct {
	Queue    string    `json:"queue,omitempty"`
	Topic    string    `json:"topic,omitempty"`
	Sub      string    `json:"subscription,omitempty"`
	Messages []dumpMsg `json:"messages"`
	NextSeq  uint64    `json:"next_seq"` // 0 at the end
}

// doc returns out's JSON document.
func (out *dumpOut) doc() any {
	if out.Index != "" {
		d := dumpIndexJSON{Index: out.Index, NS: out.NS, Keys: out.Keys, Next: out.Next, NextHex: hex.EncodeToString(out.nextKey)}
		if d.Keys == nil {
			d.Keys = []dumpKey{}
		}
		return d
	}
	d := dumpDestJSON{Queue: out.Queue, Topic: out.Topic, Sub: out.Sub, Messages: out.Messages, NextSeq: out.NextSeq}
	if d.Messages == nil {
		d.Messages = []dumpMsg{}
	}
	return d
}

func runDump(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("dump", "--index NAME [--ns NAMESPACE] | --queue NAME | --topic NAME [--sub NAME] DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	index := fs.String("index", "", "the index whose keys to list")
	ns := fs.String("ns", "", "with --index: the kdb namespace the index is in (an integration's; inspect lists them)")
	queue := fs.String("queue", "", "the queue whose messages to list")
	topic := fs.String("topic", "", "the topic whose messages to list")
	sub := fs.String("sub", "", "with --topic: only the messages pending for this durable subscription")
	limit := fs.Int("limit", 100, "at most this many keys or messages (0: all)")
	start := fs.String("start", "", "first key (index; with --hex, in hex) or first sequence number (destination)")
	hexKeys := fs.Bool("hex", false, "print keys in hex; --start is hex")
	values := fs.Bool("values", false, "print values and message bodies too")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	n := 0
	for _, s := range []string{*index, *queue, *topic} {
		if s != "" {
			n++
		}
	}
	if *limit < 0 {
		return usageErr(fs, stdout, "--limit %d: want 0 (all) or more", *limit)
	}
	if n != 1 || (*sub != "" && *topic == "") || (*ns != "" && *index == "") {
		err := errors.New("give exactly one of --index, --queue, --topic (--sub only with --topic, --ns only with --index)")
		fmt.Fprintf(stderr, "kdbtool dump: %s\n", err)
		fs.Usage()
		return argsFailed(fs, stdout, err)
	}
	if err := storeExists(dir); err != nil {
		return failed(stdout, stderr, "dump", *asJSON, "", err, exitFor(err))
	}
	var from []byte
	var fromSeq uint64
	if *index != "" {
		from = []byte(*start)
		if *hexKeys {
			if from, err = hex.DecodeString(*start); err != nil {
				return failed(stdout, stderr, "dump", *asJSON, "--start: ", err, exitUsage)
			}
		}
	} else if *start != "" {
		if fromSeq, err = strconv.ParseUint(*start, 10, 64); err != nil {
			return failed(stdout, stderr, "dump", *asJSON, "--start: ", err, exitUsage)
		}
	}
	max := *limit
	if max == 0 {
		max = int(^uint(0) >> 1)
	}
	out, err := retryLive(dir, func() (*dumpOut, bool, error) {
		out := &dumpOut{Index: *index, NS: *ns, Queue: *queue, Topic: *topic, Sub: *sub}
		db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
		if err != nil {
			return out, false, err
		}
		defer db.Close()
		if *index != "" {
			err = dumpIndex(db, out, *ns, *index, from, max, *values)
		} else {
			err = dumpDest(db, out, fromSeq, max, *values)
		}
		return out, err == nil, err
	})
	switch {
	case errors.Is(err, kdb.ErrInvalid): // a bad --ns
		return failed(stdout, stderr, "dump", *asJSON, "", err, exitUsage)
	case errors.Is(err, kdb.ErrNotFound):
		return failed(stdout, stderr, "dump", *asJSON, "", err, exitProblems)
	case err != nil:
		return failed(stdout, stderr, "dump", *asJSON, "", err, exitFor(err))
	}
	if *asJSON {
		return writeJSON(stdout, out.doc())
	}
	printDump(stdout, out, *hexKeys, *values)
	return exitOK
}

// printDump prints the human output. Every name, key, property and value
// is escaped (esc), so none can forge a line of the listing.
func printDump(w io.Writer, out *dumpOut, hexKeys, values bool) {
	for _, k := range out.Keys {
		key := strconv.Quote(k.Key)
		if hexKeys || k.Key == "" && k.KeyHex != "" {
			key = k.KeyHex
		}
		if values {
			fmt.Fprintf(w, "%s\t%s\n", key, escBytes(k.value))
		} else {
			fmt.Fprintf(w, "%s\t%d bytes\n", key, k.ValueSize)
		}
	}
	for _, dm := range out.Messages {
		m := dm.msg // the exact strings, escaped below
		fmt.Fprintf(w, "%d\t%s\t%d bytes", m.Seq, esc(m.ID), dm.BodySize)
		if m.ProducerID != "" {
			fmt.Fprintf(w, "\tproducer %s/%d", esc(m.ProducerID), m.ProducerSeq)
		}
		keys := make([]string, 0, len(m.Properties))
		for k := range m.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "\t%s=%s", esc(k), esc(m.Properties[k]))
		}
		if values {
			fmt.Fprintf(w, "\t%s", escBytes(dm.body))
		}
		fmt.Fprintln(w)
	}
	if out.Next != "" {
		if hexKeys || esc(string(out.nextKey)) != string(out.nextKey) {
			fmt.Fprintf(w, "... more: --hex --start %s\n", hex.EncodeToString(out.nextKey))
		} else {
			fmt.Fprintf(w, "... more: --start %s\n", out.nextKey)
		}
	}
	if out.NextSeq != 0 {
		fmt.Fprintf(w, "... more: --start %d\n", out.NextSeq)
	}
}

// exactJSON returns b for the JSON output: as text if it is valid UTF-8
// (else nil: JSON would replace the bad bytes), and in hex.
// utf8Or returns s if it is valid UTF-8, else "" (its hex says what it
// is).
func utf8Or(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return ""
}

func exactJSON(b []byte) (text, hexed *string) {
	h := hex.EncodeToString(b)
	if utf8.Valid(b) {
		s := string(b)
		return &s, &h
	}
	return nil, &h
}

func dumpIndex(db *kdb.DB, out *dumpOut, ns, name string, from []byte, max int, values bool) error {
	view := db.View
	if ns != "" {
		n, err := db.Namespace(ns)
		if err != nil {
			return err
		}
		view = n.View
	}
	return view(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		if !slices.Contains(names, name) {
			return fmt.Errorf("index %q: %w", name, kdb.ErrNotFound)
		}
		out.Keys = []dumpKey{}
		it := s.Iter(name)
		for ok := it.Seek(from); ok; ok = it.Next() {
			if len(out.Keys) == max {
				out.nextKey = bytes.Clone(it.Key())
				if utf8.Valid(it.Key()) {
					out.Next = string(it.Key())
				} else {
					out.Next = hex.EncodeToString(it.Key())
				}
				break
			}
			k := dumpKey{KeyHex: hex.EncodeToString(it.Key())}
			if utf8.Valid(it.Key()) {
				k.Key = string(it.Key())
			}
			v := it.Value()
			if v == nil && it.Err() != nil {
				break
			}
			k.ValueSize = len(v)
			if values {
				k.Value, k.ValueHex = exactJSON(v)
				k.value = bytes.Clone(v)
			}
			out.Keys = append(out.Keys, k)
		}
		return it.Err()
	})
}

func dumpDest(db *kdb.DB, out *dumpOut, from uint64, max int, values bool) error {
	kind, name := broker.Queue, out.Queue
	if out.Topic != "" {
		kind, name = broker.Topic, out.Topic
	}
	if _, err := brokerOf(db).Destination(kind, name); err != nil {
		return fmt.Errorf("%s %q: %w", kind, name, err)
	}
	const page = 1000
	out.Messages = []dumpMsg{}
	for len(out.Messages) < max {
		// One more than still wanted, to know if there is a next (max may
		// be the largest int: no overflow).
		n := page
		if rem := max - len(out.Messages); rem < page {
			n = rem + 1
		}
		var ms []broker.Message
		var err error
		if out.Sub != "" {
			ms, err = brokerOf(db).ReadSub(name, out.Sub, from, n)
		} else {
			ms, err = brokerOf(db).Read(kind, name, from, n)
		}
		if err != nil {
			return err
		}
		for _, m := range ms {
			if len(out.Messages) == max {
				out.NextSeq = m.Seq
				return nil
			}
			dm := dumpMsg{Seq: m.Seq, ID: utf8Or(m.ID), IDHex: hex.EncodeToString([]byte(m.ID)),
				ProducerID: utf8Or(m.ProducerID), ProducerIDHex: hex.EncodeToString([]byte(m.ProducerID)),
				ProducerSeq: m.ProducerSeq, Properties: map[string]string{}, BodySize: len(m.Body), msg: &m}
			for k, v := range m.Properties {
				if utf8.ValidString(k) && utf8.ValidString(v) {
					dm.Properties[k] = v
					continue
				}
				if dm.PropertiesHex == nil {
					dm.PropertiesHex = map[string]string{}
					for k, v := range m.Properties {
						dm.PropertiesHex[hex.EncodeToString([]byte(k))] = hex.EncodeToString([]byte(v))
					}
				}
			}
			if values {
				dm.Body, dm.BodyHex = exactJSON(m.Body)
				dm.body = m.Body
			}
			m.Body = nil // kept in dm.body with --values only
			out.Messages = append(out.Messages, dm)
			from = m.Seq + 1
		}
		if len(ms) < n {
			return nil
		}
	}
	return nil
}

// brokerOf returns the broker's message store in db (opening it writes
// nothing).
func brokerOf(db *kdb.DB) *broker.Broker {
	b, err := broker.Open(db)
	if err != nil {
		panic(err) // broker.Namespace is a valid namespace name
	}
	return b
}
