package wire

import "time"

// TypeAssistantReport is the enrolled assistant's progress report (v4):
// assistant → panel, every few seconds and on change.
const TypeAssistantReport Type = "assistant_report"

// AssistantReport is what an enrolled assistant (a worker kind that runs on
// a person's own machine) tells the panel: its recent tasks, their
// progress, spend and pending approvals. No page text, draft or secret.
type AssistantReport struct {
	// Paused is the assistant's pause switch (its own or the panel's).
	Paused bool `json:"paused"`
	// Model names the model and endpoint kind ("ollama qwen2.5:7b").
	Model string `json:"model"`
	// TokensToday and CostTodayUSD are the day's model use so far.
	TokensToday  int     `json:"tokens_today"`
	CostTodayUSD float64 `json:"cost_today_usd"`
	// Tasks are the most recent tasks, newest first (at most 20).
	Tasks []AssistantTask `json:"tasks"`
}

// AssistantTask is one task in an AssistantReport.
type AssistantTask struct {
	ID         int64   `json:"id"`
	Goal       string  `json:"goal"`
	Status     string  `json:"status"`
	StopReason string  `json:"stop_reason,omitempty"`
	Steps      int     `json:"steps"`
	Tokens     int     `json:"tokens"`
	CostUSD    float64 `json:"cost_usd"`
	// Tabs are the names of the task's tabs ("brief", "drafts").
	Tabs []string `json:"tabs,omitempty"`
	// Progress is the task's recent steps in a few words.
	Progress string `json:"progress,omitempty"`
	// PendingApproval describes the held action waiting for the person.
	PendingApproval string    `json:"pending_approval,omitempty"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// MessageType implements Message.
func (AssistantReport) MessageType() Type { return TypeAssistantReport }
