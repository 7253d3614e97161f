// Sign in: post the user and password (or API token) to /api/v1/session, then go on.
"use strict";

document.addEventListener("DOMContentLoaded", async () => {
  const form = document.getElementById("login-form");
  const error = document.getElementById("login-error");
  const button = document.getElementById("sign-in");
  const next = form.dataset.next || "/";

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const user = form.elements.user.value.trim();
    const password = form.elements.password.value;
    for (const [input, value] of [[form.elements.user, user], [form.elements.password, password]]) {
      input.setAttribute("aria-invalid", value ? "false" : "true");
    }
    if (!user || !password) {
      gp.showError(error, "enter your user name and your password or API token");
      (user ? form.elements.password : form.elements.user).focus();
      return;
    }
    button.disabled = true;
    button.textContent = "Signing in…";
    try {
      await gp.api("POST", "/session", { user, password }, { redirectOn401: false });
      location.assign(next);
    } catch (failure) {
      gp.showError(error, failure.message);
      form.elements.password.select();
      form.elements.password.focus();
      button.disabled = false;
      button.textContent = "Sign in";
    }
  });

  // A SameSite=Strict cookie is not sent on a link from another site: ask once more from here.
  try {
    await gp.api("GET", "/whoami", undefined, { redirectOn401: false });
    location.replace(next);
  } catch (ignored) {
    // not signed in: the form it is
  }
});
