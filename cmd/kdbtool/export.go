package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kdb-project/kdb"
)

func init() {
	register("export", command{
		summary: "write a portable, versioned snapshot of the store (indexes, destinations, subscriptions) to FILE",
		run:     runExport,
	})
	register("import", command{
		summary: "create a new store in DIR from a snapshot written by export",
		run:     runImport,
	})
}

// Snapshot file: JSON Lines. The first line is the header, the last the
// trailer (its count guards against a truncated file); every line in
// between is one exportRec. []byte fields are base64 (encoding/json).
const (
	exportFormat  = "kdb-export"
	exportVersion = 1
)

type exportHeader struct {
	Format       string `json:"format"`
	Version      int    `json:"version"`
	CheckpointID string `json:"checkpoint_id,omitempty"` // of the source store, for information
}

// exportRec is one line of the snapshot. T says which fields are set:
//
//	"index": Index                       an index (listed before its keys)
//	"kv":    Index, Key, Value           one key
//	"dest":  Kind, Name, NextSeq         a destination
//	"sub":   Name (topic), Sub           a durable subscription
//	"msg":   Kind, Name, Msg, Pending    a kept message; Pending (topics):
//	                                     the subscriptions that have not acked it
//	"prepared": XID                      a prepared transaction (name only)
//	"end":   Count                       trailer: the number of records before it
type exportRec struct {
	T       string       `json:"t"`
	Index   string       `json:"index,omitempty"`
	Key     []byte       `json:"key,omitempty"`
	Value   []byte       `json:"value,omitempty"`
	Kind    string       `json:"kind,omitempty"`
	Name    string       `json:"name,omitempty"`
	NextSeq uint64       `json:"next_seq,omitempty"`
	Sub     string       `json:"sub,omitempty"`
	Msg     *kdb.Message `json:"msg,omitempty"`
	Pending []string     `json:"pending,omitempty"`
	XID     string       `json:"xid,omitempty"`
	Count   int64        `json:"count,omitempty"`
}

type exportOut struct {
	File          string   `json:"file"`
	Version       int      `json:"version"`
	Indexes       int      `json:"indexes"`
	Keys          int64    `json:"keys"`
	Destinations  int      `json:"destinations"`
	Subscriptions int      `json:"subscriptions"`
	Messages      int64    `json:"messages"`
	Prepared      int      `json:"prepared"`
	Records       int64    `json:"records"`
	Warnings      []string `json:"warnings"`
}

func kindName(k kdb.DestKind) string {
	if k == kdb.Topic {
		return "topic"
	}
	return "queue"
}

func parseKind(s string) (kdb.DestKind, error) {
	switch s {
	case "queue":
		return kdb.Queue, nil
	case "topic":
		return kdb.Topic, nil
	}
	return 0, fmt.Errorf("unknown destination kind %q", s)
}

func runExport(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("export", "DIR FILE", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	dir, file := fs.Arg(0), fs.Arg(1)
	if err := storeExists(dir); err != nil {
		fmt.Fprintf(stderr, "kdbtool export: %v\n", err)
		return exitIO
	}
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool export: %v\n", err)
		return exitFor(err)
	}
	defer db.Close()
	out, err := exportStore(db, file, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool export: %v\n", err)
		return exitFor(err)
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "exported to %s (format %s version %d): %d indexes, %d keys, %d destinations, %d subscriptions, %d messages\n",
		file, exportFormat, exportVersion, out.Indexes, out.Keys, out.Destinations, out.Subscriptions, out.Messages)
	for _, w := range out.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return exitOK
}

// exportStore writes the snapshot to file.tmp, syncs it and renames it
// to file. On return (nil) the file is durable.
func exportStore(db *kdb.DB, file string, stderr io.Writer) (*exportOut, error) {
	out := &exportOut{File: file, Version: exportVersion, Warnings: []string{}}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	bw := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(bw)
	p := newProgress(stderr, "exported records")
	put := func(r *exportRec) error {
		out.Records++
		p.add(1)
		return enc.Encode(r)
	}
	err = enc.Encode(exportHeader{Format: exportFormat, Version: exportVersion, CheckpointID: db.Recovery().CheckpointID})
	if err == nil {
		err = db.View(func(s *kdb.Snapshot) error {
			names, err := s.Indexes()
			if err != nil {
				return err
			}
			for _, n := range names {
				out.Indexes++
				if err := put(&exportRec{T: "index", Index: n}); err != nil {
					return err
				}
				it := s.Iter(n)
				for ok := it.First(); ok; ok = it.Next() {
					v := it.Value()
					if v == nil && it.Err() != nil {
						break
					}
					out.Keys++
					if err := put(&exportRec{T: "kv", Index: n, Key: it.Key(), Value: v}); err != nil {
						return err
					}
				}
				if err := it.Err(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil {
		err = exportBroker(db, out, put)
	}
	if err == nil {
		err = put(&exportRec{T: "end", Count: out.Records})
	}
	p.done()
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err == nil {
		err = syncDir(filepath.Dir(file))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func exportBroker(db *kdb.DB, out *exportOut, put func(*exportRec) error) error {
	dests, err := db.Destinations()
	if err != nil {
		return err
	}
	const page = 1000
	for _, d := range dests {
		out.Destinations++
		if err := put(&exportRec{T: "dest", Kind: kindName(d.Kind), Name: d.Name, NextSeq: d.NextSeq}); err != nil {
			return err
		}
		// pending[seq] lists the subscriptions that have not acked seq.
		pending := map[uint64][]string{}
		if d.Kind == kdb.Topic {
			subs, err := db.Subscriptions(d.Name)
			if err != nil {
				return err
			}
			for _, s := range subs {
				out.Subscriptions++
				if err := put(&exportRec{T: "sub", Name: d.Name, Sub: s.Name}); err != nil {
					return err
				}
				for from := uint64(0); ; {
					ms, err := db.ReadSub(d.Name, s.Name, from, page)
					if err != nil {
						return err
					}
					for _, m := range ms {
						pending[m.Seq] = append(pending[m.Seq], s.Name)
						from = m.Seq + 1
					}
					if len(ms) < page {
						break
					}
				}
			}
		}
		for from := uint64(0); ; {
			ms, err := db.Read(d.Kind, d.Name, from, page)
			if err != nil {
				return err
			}
			for i := range ms {
				m := &ms[i]
				out.Messages++
				if err := put(&exportRec{T: "msg", Kind: kindName(d.Kind), Name: d.Name, Msg: m, Pending: pending[m.Seq]}); err != nil {
					return err
				}
				from = m.Seq + 1
			}
			if len(ms) < page {
				break
			}
		}
	}
	xids, err := db.Prepared()
	if err != nil {
		return err
	}
	for _, x := range xids {
		out.Prepared++
		if err := put(&exportRec{T: "prepared", XID: x}); err != nil {
			return err
		}
	}
	if out.Prepared > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf(
			"%d prepared transactions are listed by name only: the broker API does not expose their operations, so import cannot recreate them", out.Prepared))
	}
	return nil
}

var errBadSnapshot = errors.New("not a valid kdb export")

func runImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import", "FILE DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	file, dir := fs.Arg(0), fs.Arg(1)
	if _, err := os.Stat(filepath.Join(dir, "db.data")); err == nil {
		fmt.Fprintf(stderr, "kdbtool import: %s already holds a store; import creates a new one\n", dir)
		return exitProblems
	}
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool import: %v\n", err)
		return exitIO
	}
	defer f.Close()
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	// The journal is synced by the checkpoint Close takes: a crash during
	// import means importing again into a new directory.
	db, err := kdb.Open(dir, &kdb.Options{Sync: kdb.UnsafeSyncNever})
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool import: %v\n", err)
		return exitFor(err)
	}
	out, err := importStore(db, f, stderr)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool import: %s: %v\n", file, err)
		if created {
			// Leave no half-imported store behind.
			os.RemoveAll(dir)
		}
		if errors.Is(err, errBadSnapshot) {
			return exitProblems
		}
		return exitFor(err)
	}
	out.File = file
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "imported %s into %s: %d indexes, %d keys, %d destinations, %d subscriptions, %d messages\n",
		file, dir, out.Indexes, out.Keys, out.Destinations, out.Subscriptions, out.Messages)
	for _, w := range out.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return exitOK
}

func importStore(db *kdb.DB, r io.Reader, stderr io.Writer) (*exportOut, error) {
	out := &exportOut{Version: exportVersion, Warnings: []string{}}
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var h exportHeader
	if err := dec.Decode(&h); err != nil || h.Format != exportFormat {
		return nil, fmt.Errorf("%w: no %s header", errBadSnapshot, exportFormat)
	}
	if h.Version != exportVersion {
		return nil, fmt.Errorf("%w: version %d, this kdbtool reads version %d", errBadSnapshot, h.Version, exportVersion)
	}
	p := newProgress(stderr, "imported records")
	defer p.done()
	b := kdb.NewBatch()
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := db.Write(b)
		b.Reset()
		return err
	}
	renumbered := false
	for {
		var rec exportRec
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: truncated (no end record after %d records)", errBadSnapshot, out.Records)
			}
			return nil, fmt.Errorf("%w: record %d: %v", errBadSnapshot, out.Records+1, err)
		}
		if rec.T == "end" {
			if rec.Count != out.Records {
				return nil, fmt.Errorf("%w: end record counts %d records, read %d", errBadSnapshot, rec.Count, out.Records)
			}
			break
		}
		out.Records++
		p.add(1)
		if rec.T != "kv" {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		switch rec.T {
		case "index":
			out.Indexes++
		case "kv":
			out.Keys++
			b.Put(rec.Index, rec.Key, rec.Value)
			if b.Len() >= 1000 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		case "dest":
			k, err := parseKind(rec.Kind)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errBadSnapshot, err)
			}
			out.Destinations++
			if err := db.CreateDestination(k, rec.Name); err != nil {
				return nil, err
			}
		case "sub":
			out.Subscriptions++
			if err := db.Subscribe(rec.Name, rec.Sub); err != nil {
				return nil, err
			}
		case "msg":
			k, err := parseKind(rec.Kind)
			if err != nil || rec.Msg == nil {
				return nil, fmt.Errorf("%w: record %d: bad message", errBadSnapshot, out.Records)
			}
			out.Messages++
			old := rec.Msg.Seq
			seq, err := db.Send(k, rec.Name, rec.Msg)
			if err != nil {
				return nil, err
			}
			if seq != old {
				renumbered = true
			}
			if k == kdb.Topic {
				if err := ackNotPending(db, rec.Name, seq, rec.Pending); err != nil {
					return nil, err
				}
			}
		case "prepared":
			out.Prepared++
		default:
			return nil, fmt.Errorf("%w: record %d: unknown type %q", errBadSnapshot, out.Records, rec.T)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if renumbered {
		out.Warnings = append(out.Warnings, "message sequence numbers were renumbered (the broker API assigns them); order, IDs, properties and bodies are kept")
	}
	if out.Prepared > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d prepared transactions were not imported (the snapshot holds their names only)", out.Prepared))
	}
	return out, nil
}

// ackNotPending acks topic message seq for every subscription of the
// topic that had already acked it in the source store.
func ackNotPending(db *kdb.DB, topic string, seq uint64, pending []string) error {
	subs, err := db.Subscriptions(topic)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, s := range pending {
		keep[s] = true
	}
	for _, s := range subs {
		if !keep[s.Name] {
			if err := db.AckSub(topic, s.Name, seq); err != nil {
				return err
			}
		}
	}
	return nil
}
