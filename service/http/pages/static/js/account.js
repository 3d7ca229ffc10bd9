// The account page: sign up, sign in, sign out (contract 1.2, "Accounts and personal tokens").
//
// Signing up or in brings a personal token, kept in this browser's storage as the seat tokens
// are (api.js: rememberAccount) and sent only in the Authorization header. Signing out forgets
// it, and revokes it on the server first when it may (its scope "account").

import { api, forgetAccount, heldAccount, rememberAccount } from "./api.js";
import { $, show } from "./dom.js";

const HANDLE = /^[A-Za-z][A-Za-z0-9_-]{1,19}$/;
const SCOPES = ["play", "account"];

function say(text) {
  const el = $("#account-message");
  el.textContent = text;
  show(el, Boolean(text));
}

function status(text) {
  $("#account-status").textContent = text;
}

function render() {
  const account = heldAccount();
  show($("#signed-in"), Boolean(account));
  show($("#signed-out"), !account);
  if (account) {
    $("#signed-in-handle").textContent = account.handle;
    $("#profile-link").setAttribute("href", `/players/${encodeURIComponent(account.handle)}`);
  }
}

/** A field that is not right: said, marked and focused. */
function refuse(input, text) {
  input.setAttribute("aria-invalid", "true");
  input.addEventListener("input", () => input.removeAttribute("aria-invalid"), { once: true });
  say(text);
  input.focus();
}

/** The form's handle and password, or null (the reason said) when they cannot be sent. */
function credentials(form, { signingUp }) {
  const handle = form.elements.handle;
  const password = form.elements.password;
  const value = handle.value.trim();
  if (!value) return refuse(handle, "Type your handle.");
  if (signingUp && !HANDLE.test(value)) {
    return refuse(handle, "A handle is 2 to 20 letters, digits, _ and -, beginning with a letter.");
  }
  if (!password.value) return refuse(password, "Type your password.");
  if (signingUp && password.value.length < 8) {
    return refuse(password, "Choose a password of 8 characters or more.");
  }
  return { handle: value, password: password.value };
}

function signedIn(account, text) {
  rememberAccount(account);
  for (const form of [$("#sign-in-form"), $("#sign-up-form")]) form.reset();
  say("");
  status(text);
  render();
  $("#signed-in-h").focus();
}

async function submit(event, signingUp) {
  event.preventDefault();
  const form = event.currentTarget;
  say("");
  status("");
  const sent = credentials(form, { signingUp });
  if (!sent) return;
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    if (signingUp) {
      const made = await api("/v1/accounts", { method: "POST", body: sent });
      signedIn(
        { handle: made.account.handle, token: made.token, tokenId: made.token_id, scopes: SCOPES },
        `Welcome, ${made.account.handle}: your account is made, and you are signed in.`,
      );
    } else {
      const issued = await api("/v1/tokens", {
        method: "POST",
        body: { ...sent, scopes: SCOPES, description: "Signed in on the web pages" },
      });
      // The account as registered (its handle's case), with the new token.
      const me = await api("/v1/account", { token: issued.token });
      signedIn(
        { handle: me.handle, token: issued.token, tokenId: issued.id, scopes: issued.scopes },
        `Welcome back, ${me.handle}.`,
      );
    }
  } catch (e) {
    if (e.code === "handle_taken") refuse(form.elements.handle, e.detail);
    else say(e.status === 401 ? "That handle and password do not match an account." : e.detail);
  } finally {
    button.disabled = false;
  }
}

async function signOut() {
  const account = heldAccount();
  say("");
  let note = "";
  if (account && account.tokenId && account.scopes.includes("account")) {
    try {
      await api(`/v1/account/tokens/${encodeURIComponent(account.tokenId)}`, {
        method: "DELETE",
        token: account.token,
      });
    } catch (e) {
      if (e.status !== 401 && e.status !== 404) {
        note = ` The server could not be told (${e.detail}): the sign-in stays valid there until it is revoked.`;
      }
    }
  }
  forgetAccount();
  render();
  status(`You signed out: this browser forgot your sign-in.${note}`);
  $("#sign-in-handle").focus();
}

/** A sign-in this browser kept may have ended elsewhere (revoked, the account closed). */
async function check() {
  const account = heldAccount();
  if (!account) return;
  try {
    await api("/v1/account", { token: account.token });
  } catch (e) {
    if (e.status === 401) {
      forgetAccount();
      render();
      status("");
      say("Your sign-in has ended (signed out elsewhere, or revoked): sign in again.");
    }
  }
}

$("#sign-in-form").addEventListener("submit", (event) => submit(event, false));
$("#sign-up-form").addEventListener("submit", (event) => submit(event, true));
// The page serves the forms' buttons disabled, so that no form is sent without the handlers
// above (account.html): they are on now.
for (const button of document.querySelectorAll("#signed-out button[type=submit]")) button.disabled = false;
$("#sign-out").addEventListener("click", signOut);
render();
check();
