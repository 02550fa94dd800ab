package alarm

import (
	"strconv"
	"strings"
)

// kindWords are the alarm kinds in words, singular and plural; the console
// shows these and keeps the code small beside them.
var kindWords = map[string][2]string{
	"worker.hung":            {"worker hung", "workers hung"},
	"worker.crash_loop":      {"worker out of restarts (crash loop)", "workers out of restarts (crash loop)"},
	"agent.crash_loop":       {"agent process in a crash loop", "agent processes in a crash loop"},
	"queue.stuck":            {"panel queue stuck", "panel queues stuck"},
	"cell.failing":           {"cell failing", "cells failing"},
	"claim.conflict":         {"load booked twice", "loads booked twice"},
	"claim.restore":          {"tenant held after a restore until its bookings are looked up", "tenants held after a restore until their bookings are looked up"},
	"crawl.zero_results":     {"crawl found no items", "crawls found no items"},
	"crawl.sudden_drop":      {"crawl found far fewer items", "crawls found far fewer items"},
	"crawl.selector_failure": {"crawl page layout changed", "crawl page layouts changed"},
	"crawl.error_rate":       {"crawl failing to fetch", "crawls failing to fetch"},
	"crawl.captcha":          {"crawl stopped by a captcha", "crawls stopped by a captcha"},
	"crawl.proxy_removed":    {"proxy removed from its pool", "proxies removed from their pools"},
	"schedule.invalid":       {"schedule cannot run", "schedules cannot run"},
	"schedule.lost":          {"schedule run lost", "schedule runs lost"},
	"schedule.failed":        {"schedule run failed", "schedule runs failed"},
	"audit.verify_failed":    {"audit log verification failed", "audit log verifications failed"},
	"assistant.limit":        {"assistant stopped at a limit", "assistants stopped at a limit"},
	"limit.reached":          {"limit reached", "limits reached"},
	"embedded.failed":        {"embedded service failed", "embedded services failed"},
	"notify.test":            {"test notification", "test notifications"},
}

// KindWords names n alarms of a kind in words ("2 workers hung"); a kind
// without words is named by its code with its dots read as spaces.
func KindWords(kind string, n int) string {
	w, ok := kindWords[kind]
	if !ok {
		s := strings.NewReplacer(".", " ", "_", " ").Replace(kind)
		w = [2]string{"alarm: " + s, "alarms: " + s}
	}
	if n == 1 {
		return "1 " + w[0]
	}
	return strconv.Itoa(n) + " " + w[1]
}

// KindName is a kind in words without a count ("worker hung").
func KindName(kind string) string {
	if w, ok := kindWords[kind]; ok {
		return w[0]
	}
	return strings.NewReplacer(".", " ", "_", " ").Replace(kind)
}
