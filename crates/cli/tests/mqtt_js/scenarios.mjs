// MQTT.js (npm `mqtt`, pinned in package.json) against a tidings broker, one step per run,
// driven by crates/cli/tests/mqtt_js.rs, which starts the broker and the native `tidings`
// commands on the other side and checks what these steps print.
//
//   node scenarios.mjs subscribe URL VERSION FILTER QOS COUNT [CLIENT_ID]
//       Subscribes, prints `subscribed`, then one line per message (see `line`) until COUNT.
//       With CLIENT_ID: a persistent session (clean false; 5.0: session expiry 300 s), and
//       `session_present=BOOL` is printed first.
//   node scenarios.mjs publish URL VERSION TOPIC PAYLOAD QOS [retain] [KEY=VALUE...]
//       Publishes once (KEY=VALUE: 5.0 user properties), waits for PUBACK at QoS 1, prints
//       `published`.
//   node scenarios.mjs scram URL 5 USER PASSWORD TOPIC [stall]
//       Logs in with MQTT 5 enhanced authentication, SCRAM-SHA-256 (its client side is below,
//       on Node's crypto; MQTT.js carries the AUTH packets through its `handleAuth` hook),
//       checks the server's signature in CONNACK, re-authenticates on the live connection
//       (AUTH 0x19) and checks the signature in the final AUTH, then publishes `scram` to TOPIC
//       at QoS 1. Prints `connected verified=BOOL`, `reauthenticated verified=BOOL`,
//       `published`; a refused CONNACK prints `refused code=N`. With `stall`, never answers
//       the server's first message and prints `closed` when the broker gives up; with
//       `stall-reauth`, the same in the re-authentication, with a keep alive of 1 s (its pings
//       keep the connection from going silent), printing `connected ...` then `closed`.
//   node scenarios.mjs refusals ws://HOST:PORT/mqtt VERSION
//       Bad WebSocket input (with the `ws` package, which MQTT.js uses): an upgrade offering no
//       MQTT subprotocol, and a text message after a good upgrade; prints how each was answered.
//   node scenarios.mjs resume URL VERSION CLIENT_ID COUNT
//       Reconnects a persistent session without subscribing: prints `session_present=BOOL`,
//       then what the session kept, one line per message, until COUNT.
//
// URL is mqtt://HOST:PORT or ws://HOST:PORT/mqtt (wss://, with the environment's MQTT_CA naming
// the PEM file of the CA to trust); VERSION is 4 (3.1.1) or 5. MQTT_USER and MQTT_PASSWORD, if
// set, log in. Every step gives up after 20 s, saying where it was, and exits non-zero on any
// error (a refused CONNECT, PUBLISH or SUBSCRIBE included).

import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import mqtt from "mqtt";
import WebSocket from "ws";

const [scenario, url, versionText, ...rest] = process.argv.slice(2);
const version = Number(versionText);
let stage = "connecting";

setTimeout(() => fail(`timed out while ${stage}`), 20_000).unref();

function fail(why) {
  process.stderr.write(`${scenario} ${url} v${version}: ${why}\n`);
  process.exit(1);
}

// One message as a line: `TOPIC PAYLOAD qos=N retain=BOOL`, then, if it has user properties,
// ` |` and ` KEY=VALUE` for each.
function line(topic, payload, packet) {
  const out = `${topic} ${payload.toString()} qos=${packet.qos} retain=${packet.retain}`;
  const user = Object.entries(packet.properties?.userProperties ?? {});
  return user.length === 0 ? out : `${out} |${user.map(([key, value]) => ` ${key}=${value}`).join("")}`;
}

// Connects with `options` and resolves with the client, messages already going to `onMessage`
// (a persistent session's messages follow CONNACK at once). With a persistent session's
// `clientId`, prints `session_present=BOOL` as CONNACK is read, so before any of them: MQTT.js
// may emit `connect` only after the first messages, so `packetreceive` is watched instead.
function connect(options, onMessage) {
  const client = mqtt.connect(url, {
    protocolVersion: version,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    ...(process.env.MQTT_CA ? { ca: readFileSync(process.env.MQTT_CA) } : {}),
    ...(process.env.MQTT_USER ? { username: process.env.MQTT_USER, password: process.env.MQTT_PASSWORD } : {}),
    ...options,
  });
  if (options.clientId) {
    client.on("packetreceive", (packet) => {
      if (packet.cmd === "connack") {
        console.log(`session_present=${packet.sessionPresent}`);
      }
    });
  }
  if (onMessage) {
    client.on("message", onMessage);
  }
  return new Promise((resolve, reject) => {
    client.once("connect", () => resolve(client));
    client.once("error", reject);
    client.once("close", () => reject(new Error(`closed while ${stage}`)));
  });
}

function persistent(clientId) {
  const options = { clientId, clean: false };
  if (version === 5) {
    options.properties = { sessionExpiryInterval: 300 };
  }
  return options;
}

// Prints each message as it comes; resolves after `count`.
function counter(count) {
  let seen = 0;
  let done;
  const finished = new Promise((resolve) => {
    done = resolve;
  });
  const onMessage = (topic, payload, packet) => {
    console.log(line(topic, payload, packet));
    seen += 1;
    if (seen === count) {
      done();
    }
  };
  return { onMessage, finished: count === 0 ? Promise.resolve() : finished };
}

async function subscribe([filter, qos, count, clientId]) {
  const { onMessage, finished } = counter(Number(count));
  const client = await connect(clientId ? persistent(clientId) : {}, onMessage);
  stage = "subscribing";
  const granted = await client.subscribeAsync(filter, { qos: Number(qos) });
  if (granted.some((grant) => grant.qos > 2)) {
    fail(`SUBSCRIBE refused: ${JSON.stringify(granted)}`);
  }
  console.log("subscribed");
  stage = `waiting for ${count} messages`;
  await finished;
  await client.endAsync();
}

async function publish([topic, payload, qos, ...more]) {
  const retain = more[0] === "retain";
  const userProperties = Object.fromEntries(
    more.slice(retain ? 1 : 0).map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
  );
  const client = await connect({});
  stage = "publishing";
  const options = { qos: Number(qos), retain };
  if (Object.keys(userProperties).length > 0) {
    options.properties = { userProperties };
  }
  await client.publishAsync(topic, payload, options);
  console.log("published");
  await client.endAsync();
}

async function resume([clientId, count]) {
  const { onMessage, finished } = counter(Number(count));
  const client = await connect(persistent(clientId), onMessage);
  stage = `waiting for ${count} kept messages`;
  await finished;
  await client.endAsync();
}

const hmac = (key, text) => createHmac("sha256", key).update(text).digest();

// The client's side of one SCRAM-SHA-256 exchange (RFC 5802): `first` to send, `final(server
// first message)` to answer with, and `verified(server final message)`.
function scramClient(user, password) {
  const nonce = randomBytes(18).toString("base64");
  const bare = `n=${user.replaceAll("=", "=3D").replaceAll(",", "=2C")},r=${nonce}`;
  let expected;
  return {
    first: Buffer.from(`n,,${bare}`),
    final(serverFirst) {
      const text = serverFirst.toString();
      const fields = Object.fromEntries(text.split(",").map((field) => [field[0], field.slice(2)]));
      if (!fields.r?.startsWith(nonce)) {
        throw new Error(`the server's nonce does not extend ours: ${text}`);
      }
      const salted = pbkdf2Sync(password, Buffer.from(fields.s, "base64"), Number(fields.i), 32, "sha256");
      const clientKey = hmac(salted, "Client Key");
      const storedKey = createHash("sha256").update(clientKey).digest();
      const withoutProof = `c=biws,r=${fields.r}`;
      const authMessage = `${bare},${text},${withoutProof}`;
      const signature = hmac(storedKey, authMessage);
      const proof = Buffer.from(clientKey.map((byte, i) => byte ^ signature[i]));
      expected = `v=${hmac(hmac(salted, "Server Key"), authMessage).toString("base64")}`;
      return Buffer.from(`${withoutProof},p=${proof.toString("base64")}`);
    },
    verified: (serverFinal) => serverFinal?.toString() === expected,
  };
}

async function scram([user, password, topic, stall]) {
  const method = "SCRAM-SHA-256";
  let exchange = scramClient(user, password);
  let reauthenticated;
  const client = mqtt.connect(url, {
    protocolVersion: 5,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    keepalive: stall === "stall-reauth" ? 1 : 60,
    properties: { authenticationMethod: method, authenticationData: exchange.first },
  });
  client.on("error", () => {}); // a refusal is read from CONNACK itself, below
  client.handleAuth = (packet, callback) => {
    if (packet.reasonCode === 0) {
      reauthenticated(exchange.verified(packet.properties?.authenticationData));
      callback();
    } else if (stall !== "stall" && !(stall === "stall-reauth" && reauthenticated)) {
      const data = exchange.final(packet.properties.authenticationData);
      callback(null, { cmd: "auth", reasonCode: 0x18, properties: { authenticationMethod: method, authenticationData: data } });
    }
  };
  stage = "authenticating";
  const connack = await new Promise((resolve) => {
    client.on("packetreceive", (packet) => packet.cmd === "connack" && resolve(packet));
    client.once("close", () => resolve(null));
  });
  if (connack === null) {
    console.log("closed");
    return;
  }
  if (connack.reasonCode !== 0) {
    console.log(`refused code=${connack.reasonCode}`);
    process.exit(1);
  }
  console.log(`connected verified=${exchange.verified(connack.properties?.authenticationData)}`);
  stage = "re-authenticating";
  exchange = scramClient(user, password);
  const closed = new Promise((resolve) => client.once("close", resolve));
  const verified = new Promise((resolve) => {
    reauthenticated = resolve;
  });
  if (stall === "stall-reauth") {
    client._sendPacket({ cmd: "auth", reasonCode: 0x19, properties: { authenticationMethod: method, authenticationData: exchange.first } });
    await closed;
    console.log("closed");
    return;
  }
  client._sendPacket({ cmd: "auth", reasonCode: 0x19, properties: { authenticationMethod: method, authenticationData: exchange.first } });
  console.log(`reauthenticated verified=${await verified}`);
  stage = "publishing";
  await client.publishAsync(topic, "scram", { qos: 1 });
  console.log("published");
  await client.endAsync();
}

// Resolves with how the broker answered a WebSocket to `url` offering `protocols`, after
// `opened` ran on it once open: `status=N` for a refused upgrade, `close=CODE REASON`.
function answer(protocols, opened) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, protocols);
    socket.on("unexpected-response", (request, response) => {
      let body = "";
      response.on("data", (chunk) => {
        body += chunk;
      });
      response.on("end", () => resolve(`status=${response.statusCode} ${body.trim()}`));
    });
    socket.on("open", () => opened(socket));
    socket.on("close", (code, reason) => resolve(`close=${code} ${reason}`));
    socket.on("error", (error) => {
      if (!error.message.includes("Unexpected server response")) {
        reject(error);
      }
    });
  });
}

async function refusals() {
  stage = "offering no MQTT subprotocol";
  console.log(`no subprotocol: ${await answer(["chat"], (socket) => socket.close())}`);
  stage = "sending a text message";
  console.log(`text message: ${await answer(["mqtt"], (socket) => socket.send("CONNECT"))}`);
}

const scenarios = { subscribe, publish, resume, refusals, scram };
if (!scenarios[scenario] || !url || ![4, 5].includes(version)) {
  fail("usage: node scenarios.mjs subscribe|publish|resume|refusals|scram URL 4|5 ARGS... (see the file's head)");
}
scenarios[scenario](rest).then(
  () => process.exit(0),
  (error) => fail(`${stage}: ${error?.message ?? error}`),
);
