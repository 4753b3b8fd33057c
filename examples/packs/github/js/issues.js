// list-open-issues: every open issue of a repository, across pages (GitHub's Link header), with a count.
// Runs in the b3os JS runtime: `fetch` goes through the egress proxy, which adds the token.
import { nextLink } from "./links.js";

const PER_PAGE = 100;

export async function listOpenIssues(input, context) {
  const { owner, repo } = input;
  const limit = input.maxIssues;
  let url =
    `https://api.github.com/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/issues` +
    `?state=open&per_page=${PER_PAGE}`;
  const issues = [];
  let pages = 0;
  while (url && issues.length < limit) {
    const response = await fetch(url, {
      headers: { Accept: "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28" },
    });
    pages += 1;
    if (response.status === 404) {
      throw Object.assign(new Error(`There is no repository ${owner}/${repo}, or the token cannot see it.`), {
        code: "repo_not_found",
      });
    }
    if (response.status === 401) {
      throw Object.assign(new Error("GitHub refused the token: connect a valid GitHub token."), {
        code: "bad_credentials",
      });
    }
    if (response.status === 429 || (response.status === 403 && response.headers.get("x-ratelimit-remaining") === "0")) {
      throw Object.assign(new Error("The token's GitHub rate limit is used up until its reset."), {
        code: "rate_limited",
      });
    }
    if (!response.ok) {
      throw new Error(`GitHub answered ${response.status} for page ${pages}`);
    }
    for (const item of await response.json()) {
      if (item.pull_request) continue; // the issues endpoint lists pull requests too
      issues.push({ number: item.number, title: item.title, url: item.html_url, author: item.user?.login ?? null });
    }
    context.log(`page ${pages}: ${issues.length} issues so far`);
    url = nextLink(response.headers.get("link"));
  }
  const truncated = issues.length > limit || url !== null;
  return { count: Math.min(issues.length, limit), issues: issues.slice(0, limit), pages, truncated };
}
