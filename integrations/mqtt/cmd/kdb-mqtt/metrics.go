package main

import (
	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/prometheus/client_golang/prometheus"
)

// collector serves kdb's Stats (read at each scrape) as Prometheus metrics.
type collector struct {
	db   *kdb.DB
	hook *kdbmqtt.Hook
}

func newCollector(db *kdb.DB, hook *kdbmqtt.Hook) *collector { return &collector{db: db, hook: hook} }

type metric struct {
	name, help string
	kind       prometheus.ValueType
	value      func(s *kdb.Stats) float64
}

var metrics = []metric{
	{"kdb_commits_total", "Journal batches written by commit leaders.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.Commits) }},
	{"kdb_batches_total", "Writes carried by those commits.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.Batches) }},
	{"kdb_write_stalls_total", "Times a writer waited for a checkpoint.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.WriteStalls) }},
	{"kdb_checkpoints_total", "Checkpoints since open.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.Checkpoints) }},
	{"kdb_checkpoint_pages_total", "Dirty pages handed to checkpoints.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.CheckpointPages) }},
	{"kdb_checkpoint_seconds_total", "Time spent in checkpoints.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return s.CheckpointTime.Seconds() }},
	{"kdb_last_checkpoint_seconds", "Duration of the last checkpoint.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return s.LastCheckpointTime.Seconds() }},
	{"kdb_journal_bytes_total", "Bytes written to the journal since open.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.JournalBytes) }},
	{"kdb_journal_fsyncs_total", "Journal fsyncs since open.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.JournalFsyncs) }},
	{"kdb_journal_records_total", "Journal records since open.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.JournalRecords) }},
	{"kdb_journal_segments", "Journal segments on disk.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.JournalSegments) }},
	{"kdb_journal_segments_removed_total", "Segments removed or archived by journal GC.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.SegmentsRemoved) }},
	{"kdb_pinned_segments", "Segments before the replay position kept for live values.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.PinnedSegments) }},
	{"kdb_compactions_total", "Journal compaction passes that moved values.", prometheus.CounterValue, func(s *kdb.Stats) float64 { return float64(s.Compactions) }},
	{"kdb_dirty_pages", "Pages changed since the last checkpoint.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.DirtyPages) }},
	{"kdb_free_pages", "Pages on the free list.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.FreePages) }},
	{"kdb_pages", "Pages in db.data.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.PageCount) }},
	{"kdb_views", "Views running now.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.Views) }},
	{"kdb_recovery_records_replayed", "Journal records the last open replayed.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.Recovery.RecordsReplayed) }},
	{"kdb_recovery_bytes_replayed", "Journal bytes the last open replayed.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.Recovery.BytesReplayed) }},
	{"kdb_recovery_pages_scanned", "Page headers the last open scanned to rebuild the free list.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return float64(s.Recovery.PagesScanned) }},
	{"kdb_recovery_seconds", "Time the last open took to recover, until it served.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return s.Recovery.TotalTime.Seconds() }},
	{"kdb_recovery_replay_seconds", "Time the last open spent replaying the journal.", prometheus.GaugeValue, func(s *kdb.Stats) float64 { return s.Recovery.ReplayTime.Seconds() }},
}

var (
	freeListDesc = prometheus.NewDesc("kdb_recovery_free_list", "How the last open got its free list (1 for the path taken): trusted, scanned or created.", []string{"path"}, nil)
	skippedDesc  = prometheus.NewDesc("kdbmqtt_skipped_records_total", "Malformed stored records the storage hook skipped at load.", nil, nil)
	descs        = func() []*prometheus.Desc {
		d := make([]*prometheus.Desc, len(metrics))
		for i, m := range metrics {
			d[i] = prometheus.NewDesc(m.name, m.help, nil, nil)
		}
		return d
	}()
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
	ch <- freeListDesc
	ch <- skippedDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.Stats()
	for i, m := range metrics {
		ch <- prometheus.MustNewConstMetric(descs[i], m.kind, m.value(&s))
	}
	ch <- prometheus.MustNewConstMetric(freeListDesc, prometheus.GaugeValue, 1, s.Recovery.FreeListPath)
	ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.CounterValue, float64(c.hook.Skipped()))
}
