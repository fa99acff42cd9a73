import { render } from "preact";
import "./styles.css";
render(<h1>hello</h1>, document.getElementById("app") as HTMLElement);
